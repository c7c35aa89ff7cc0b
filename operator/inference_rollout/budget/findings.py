"""A finding: one problem (or note) about a release, with a stable code and the field to fix."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """``error`` blocks the release (it never receives traffic); ``warning`` and ``info`` do not."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    code: str  # stable, e.g. P2-KV-POOL: the principle number, then what is wrong
    severity: Severity
    field: str  # where to fix it, e.g. spec.template.spec.containers[0].args[--max-num-seqs]
    message: str  # what is wrong and how to fix it

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


# The budget does not know where in a manifest its inputs came from, so it names them relative to
# the vLLM container ("args[--flag]") or to spec.model ("model.field"); the linter qualifies them.
ARGS_FIELD_PREFIX = "args["
MODEL_FIELD_PREFIX = "model."


def arg_field(flag: str) -> str:
    return f"{ARGS_FIELD_PREFIX}{flag}]"


def model_field(name: str) -> str:
    return f"{MODEL_FIELD_PREFIX}{name}"


def qualify_field(field: str, container_path: str) -> str:
    """``args[--x]`` → ``<container_path>.args[--x]``; ``model.x`` → ``spec.model.x``."""
    if field.startswith(ARGS_FIELD_PREFIX):
        return f"{container_path}.{field}"
    if field.startswith(MODEL_FIELD_PREFIX):
        return f"spec.{field}"
    return field

