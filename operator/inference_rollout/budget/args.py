"""The vLLM server's command line, read the way vLLM's argument parser reads it.

Accepted forms: ``--flag value`` and ``--flag=value``; ``--max_model_len`` (vLLM turns ``_`` into
``-`` in flag names); the short aliases ``-tp``, ``-pp`` and ``-q``; booleans ``--enable-x``,
``--no-enable-x`` and the older ``--enable-x false``; ``--speculative-config`` as JSON or as dotted
keys (``--speculative-config.method ngram``) and the pre-0.9 ``--speculative-model`` /
``--num-speculative-tokens``; the model as ``--model`` or the first positional after ``vllm serve``
(the positional wins, as in vLLM); and a ``sh -c "vllm serve ..."`` wrapper.

Only the flags the budget and the lints use are typed; the others are ignored.  A bad value raises
:class:`VllmArgsError` naming the flag.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .dtypes import KV_CACHE_DTYPE_PREFIXES, KV_CACHE_DTYPES, VLLM_DTYPES
from .lora import (
    DEFAULT_MAX_LORA_RANK,
    DEFAULT_MAX_LORAS,
    LORA_DTYPES,
    LORA_FLAGS,
    LORA_RANKS,
    LoraConfig,
)
from .units import parse_human_int
from .vllm_defaults import DEFAULT_GPU_MEMORY_UTILIZATION


class VllmArgsError(ValueError):
    """A flag's value that vLLM would reject; ``flag`` names it for the finding's field path."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str | None  # eagle, eagle3, ngram, medusa, mtp, draft_model, ... (None: from model)
    model: str | None  # the draft model or speculator head
    num_speculative_tokens: int | None
    draft_tensor_parallel_size: int | None = None


@dataclass(frozen=True)
class VllmArgs:
    model: str | None = None
    max_model_len: int | None = None  # None: vLLM takes the model config's max_position_embeddings
    max_model_len_auto: bool = False  # "auto" / -1: vLLM picks the longest length that fits
    max_num_seqs: int | None = None  # None: vLLM's GPU-dependent default (see vllm_defaults)
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    kv_cache_memory_bytes: int | None = None  # when set, vLLM sizes the KV pool to it exactly
    cpu_offload_gb: float = 0.0  # GiB of weights per GPU kept in CPU memory
    block_size: int | None = None
    speculative: SpeculativeConfig | None = None
    enable_chunked_prefill: bool | None = None  # None: vLLM's default, on for generative models
    hybrid_kv_cache: bool = True  # False: --disable-hybrid-kv-cache-manager (all layers full)
    context_overridden: bool = False  # --hf-overrides / --rope-scaling may extend the context
    lora: LoraConfig | None = None  # --enable-lora and its flags
    lora_flags: frozenset[str] = frozenset()  # the LoRA flags given (with or without enabling)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


# --- tokenizing -----------------------------------------------------------------------------------

_SHORT_ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size",
                  "-q": "--quantization", "-dp": "--data-parallel-size"}
# Flags that take no value.  Names starting with --enable-/--disable-/--no- are booleans too.
_BOOLEAN_FLAGS = frozenset({
    "--trust-remote-code", "--enforce-eager", "--skip-tokenizer-init", "--async-scheduling",
    "--headless", "--disable-log-stats", "--disable-log-requests", "--return-tokens-as-token-ids",
    "--allow-credentials", "--use-tqdm-on-load", "--calculate-kv-scales",
    "--fully-sharded-loras",
})
#: Flags that take every value up to the next flag (argparse ``nargs='+'``): the values are kept
#: joined by NUL, so they are neither lost nor taken for the model's positional name.
_MULTI_VALUE_FLAGS = frozenset({"--lora-modules"})
MULTI_VALUE_SEPARATOR = "\0"
_BOOLEAN_WORDS = {"true": "true", "false": "false", "1": "true", "0": "false"}
_LAUNCHER_WORDS = frozenset({"vllm", "serve", "python", "python3", "exec", "env",
                             "vllm.entrypoints.openai.api_server"})
# Flags that can extend the model's context past max_position_embeddings (rope scaling).
_CONTEXT_FLAGS = ("--hf-overrides", "--rope-scaling", "--rope-theta")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
_SHELL_SEPARATORS = frozenset({"&&", "||", ";", "|"})


def _canonical_flag(name: str) -> str:
    if name in _SHORT_ALIASES:
        return _SHORT_ALIASES[name]
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


def _is_boolean(flag: str) -> bool:
    return flag in _BOOLEAN_FLAGS or flag.startswith(("--enable-", "--disable-", "--no-"))


def _looks_like_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)  # "-1" is a value (--max-model-len -1), not a flag
    except ValueError:
        return True
    return False


def is_shell_script(word: str, following: str) -> bool:
    """``sh -c`` (or ``bash -lc``, ...): the next word is a shell script."""
    return word.rsplit("/", 1)[-1] in _SHELLS and following.startswith("-") \
        and following.endswith("c")


def _unwrap_shell(argv: Sequence[str]) -> list[str]:
    """``["sh", "-c", "exec vllm serve m --x 1"]`` → the vllm command's own tokens."""
    tokens = [str(a) for a in argv]
    for i in range(len(tokens) - 2):
        if is_shell_script(tokens[i], tokens[i + 1]):
            try:
                script = shlex.split(tokens[i + 2])
            except ValueError as e:
                message = f"the shell script cannot be split: {e}"
                raise VllmArgsError(tokens[i + 1], message) from None
            segments: list[list[str]] = [[]]
            for word in script:
                if word in _SHELL_SEPARATORS:
                    segments.append([])
                else:
                    segments[-1].append(word)
            command = next((s for s in segments if any("vllm" in w for w in s)), segments[0])
            while command and "=" in command[0] and not command[0].startswith("-"):
                command = command[1:]  # leading VAR=value assignments
            return command
    return tokens


def _tokenize(argv: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    """(flag → raw value, last one wins as in argparse; positionals).  A bare boolean maps to
    None; ``--no-x`` is stored as ``--x=false``."""
    tokens = _unwrap_shell(argv)
    options: dict[str, str | None] = {}
    positionals: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            positionals.extend(tokens[i + 1:])
            break
        if not _looks_like_flag(token):
            positionals.append(token)
            i += 1
            continue
        name, has_value, value = token.partition("=")
        flag = _canonical_flag(name)
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if flag.startswith("--no-"):
            flag, value, has_value = "--" + flag[len("--no-"):], "false", "="
        if has_value:
            options[flag] = value
        elif _is_boolean(flag):
            word = _BOOLEAN_WORDS.get((following or "").lower())
            options[flag] = word
            i += word is not None
        elif flag in _MULTI_VALUE_FLAGS:
            values = []
            while i + 1 < len(tokens) and not _looks_like_flag(tokens[i + 1]):
                values.append(tokens[i + 1])
                i += 1
            options[flag] = MULTI_VALUE_SEPARATOR.join(values) if values else None
        elif following is not None and not _looks_like_flag(following):
            options[flag] = following
            i += 1
        else:
            options[flag] = None
        i += 1
    return options, positionals


# --- typed values ---------------------------------------------------------------------------------


def _require(flag: str, raw: str | None) -> str:
    if raw is None:
        raise VllmArgsError(flag, "expects a value")
    return raw


def _typed(flag: str, raw: str | None, convert: Callable[[str], Any], what: str) -> Any:
    text = _require(flag, raw)
    try:
        return convert(text)
    except ValueError:
        hint = " (shell variables are not expanded offline)" if "$" in text else ""
        raise VllmArgsError(flag, f"{text!r} is not {what}{hint}") from None


def _positive_int(flag: str, raw: str | None, human: bool = False) -> int:
    value: int = _typed(flag, raw, parse_human_int if human else int, "an integer")
    if value < 1:
        raise VllmArgsError(flag, f"must be at least 1, got {value}")
    return value


def _boolean(flag: str, raw: str | None) -> bool:
    if raw is None:
        return True
    word = _BOOLEAN_WORDS.get(raw.lower())
    if word is None:
        raise VllmArgsError(flag, f"{raw!r} is not a boolean (true or false)")
    return word == "true"


def _nullable(raw: str | None) -> str | None:
    return None if raw is None or raw in ("", "None") else raw


def _max_model_len(raw: str | None) -> tuple[int | None, bool]:
    flag = "--max-model-len"
    text = _require(flag, raw).strip()
    if text.lower() == "auto" or text == "-1":
        return None, True
    return _positive_int(flag, text, human=True), False


def _utilization(raw: str | None) -> float:
    flag = "--gpu-memory-utilization"
    value: float = _typed(flag, raw, float, "a number")
    if not 0 < value <= 1:
        raise VllmArgsError(flag, f"must be in (0, 1], got {value}")
    return value


def _offload_gib(raw: str | None) -> float:
    flag = "--cpu-offload-gb"
    value: float = _typed(flag, raw, float, "a number")
    if not math.isfinite(value) or value < 0:
        raise VllmArgsError(flag, f"must be a finite number of GiB ≥ 0, got {raw}")
    return value


def _kv_cache_dtype(raw: str | None) -> str:
    flag = "--kv-cache-dtype"
    value = _require(flag, raw).lower()
    if value not in KV_CACHE_DTYPES and not value.startswith(KV_CACHE_DTYPE_PREFIXES):
        raise VllmArgsError(flag, f"{raw!r} is not one of {', '.join(sorted(KV_CACHE_DTYPES))}")
    return value


def _choice(flag: str, raw: str | None, choices: frozenset[str]) -> str:
    value = _require(flag, raw)
    if value.lower() not in choices:
        raise VllmArgsError(flag, f"{value!r} is not one of {', '.join(sorted(choices))}")
    return value.lower()


def _speculative(options: dict[str, str | None]) -> SpeculativeConfig | None:
    flag = "--speculative-config"
    config: dict[str, Any] = {}
    raw = _nullable(options.get(flag)) if flag in options else None
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as e:
            raise VllmArgsError(flag, f"is not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(parsed, dict):
            raise VllmArgsError(flag, "must be a JSON object, e.g. {\"method\": \"ngram\", ...}")
        config.update(parsed)
    for key, value in options.items():  # --speculative-config.num_speculative_tokens 3
        if key.startswith(flag + "."):
            config[key[len(flag) + 1:].replace("-", "_")] = value
    if options.get("--speculative-model") is not None:  # vLLM < 0.9
        config.setdefault("model", options["--speculative-model"])
    if options.get("--num-speculative-tokens") is not None:
        config.setdefault("num_speculative_tokens", options["--num-speculative-tokens"])
    if not config:
        return None

    def optional_int(key: str) -> int | None:
        value = config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise VllmArgsError(flag, f"{key} must be a positive integer, got {value!r}")
        return _positive_int(f"{flag} {key}", str(value))

    method, model = config.get("method"), config.get("model")
    return SpeculativeConfig(
        method=str(method) if method is not None else None,
        model=str(model) if model is not None else None,
        num_speculative_tokens=optional_int("num_speculative_tokens"),
        draft_tensor_parallel_size=optional_int("draft_tensor_parallel_size"),
    )


def _lora(options: dict[str, str | None]) -> LoraConfig | None:
    """The LoRA flags, checked as vLLM checks them (config/lora.py), when LoRA is enabled."""
    enabled = "--enable-lora" in options and _boolean("--enable-lora", options["--enable-lora"])
    if not enabled:
        return None
    max_loras = (_positive_int("--max-loras", options["--max-loras"])
                 if "--max-loras" in options else DEFAULT_MAX_LORAS)
    rank = (_positive_int("--max-lora-rank", options["--max-lora-rank"])
            if "--max-lora-rank" in options else DEFAULT_MAX_LORA_RANK)
    if rank not in LORA_RANKS:
        raise VllmArgsError("--max-lora-rank", f"{rank} is not one of "
                            f"{', '.join(map(str, sorted(LORA_RANKS)))}")
    cpu: int | None = None
    if "--max-cpu-loras" in options:
        given_cpu: int = _typed("--max-cpu-loras", options["--max-cpu-loras"], int, "an integer")
        cpu = given_cpu if given_cpu > 0 else None  # vLLM: unset or ≤ 0 means --max-loras
        if cpu is not None and cpu < max_loras:
            raise VllmArgsError("--max-cpu-loras", f"{cpu} must be at least --max-loras "
                                f"({max_loras}): vLLM keeps every loaded adapter in CPU memory too")
    adapters = options.get("--lora-modules") or ""
    return LoraConfig(
        max_loras=max_loras, max_lora_rank=rank, max_cpu_loras=cpu,
        lora_dtype=(_choice("--lora-dtype", options["--lora-dtype"], LORA_DTYPES)
                    if "--lora-dtype" in options else "auto"),
        fully_sharded=("--fully-sharded-loras" in options
                       and _boolean("--fully-sharded-loras", options["--fully-sharded-loras"])),
        static_adapters=len([a for a in adapters.split(MULTI_VALUE_SEPARATOR) if a.strip()]),
    )


def _model(options: dict[str, str | None], positionals: list[str]) -> str | None:
    if "serve" in positionals:
        after_serve = positionals[positionals.index("serve") + 1:]
        if after_serve:
            return after_serve[0]
    else:
        candidates = [p for p in positionals
                      if p not in _LAUNCHER_WORDS and not p.rsplit("/", 1)[-1].startswith("python")]
        if candidates:
            return candidates[0]
    return _nullable(options.get("--model"))


def parse_vllm_args(argv: Sequence[str]) -> VllmArgs:
    """Type the flags of a vLLM server command line (a container's ``command`` + ``args``)."""
    options, positionals = _tokenize(argv)

    def given(flag: str) -> bool:
        return flag in options

    max_model_len, auto = (
        _max_model_len(options["--max-model-len"]) if given("--max-model-len") else (None, False)
    )
    chunked = options.get("--enable-chunked-prefill")
    return VllmArgs(
        model=_model(options, positionals),
        max_model_len=max_model_len,
        max_model_len_auto=auto,
        max_num_seqs=(_positive_int("--max-num-seqs", options["--max-num-seqs"])
                      if given("--max-num-seqs") else None),
        max_num_batched_tokens=(
            _positive_int("--max-num-batched-tokens", options["--max-num-batched-tokens"], True)
            if given("--max-num-batched-tokens") else None),
        tensor_parallel_size=(_positive_int("--tensor-parallel-size",
                                            options["--tensor-parallel-size"])
                              if given("--tensor-parallel-size") else 1),
        pipeline_parallel_size=(_positive_int("--pipeline-parallel-size",
                                              options["--pipeline-parallel-size"])
                                if given("--pipeline-parallel-size") else 1),
        dtype=_choice("--dtype", options["--dtype"], VLLM_DTYPES) if given("--dtype") else "auto",
        kv_cache_dtype=(_kv_cache_dtype(options["--kv-cache-dtype"])
                        if given("--kv-cache-dtype") else "auto"),
        quantization=(_nullable(_require("--quantization", options["--quantization"]))
                      if given("--quantization") else None),
        gpu_memory_utilization=(_utilization(options["--gpu-memory-utilization"])
                                if given("--gpu-memory-utilization")
                                else DEFAULT_GPU_MEMORY_UTILIZATION),
        kv_cache_memory_bytes=(
            _positive_int("--kv-cache-memory-bytes", options["--kv-cache-memory-bytes"], True)
            if given("--kv-cache-memory-bytes") else None),
        cpu_offload_gb=(_offload_gib(options["--cpu-offload-gb"])
                        if given("--cpu-offload-gb") else 0.0),
        block_size=(_positive_int("--block-size", options["--block-size"])
                    if given("--block-size") else None),
        speculative=_speculative(options),
        enable_chunked_prefill=(_boolean("--enable-chunked-prefill", chunked)
                                if given("--enable-chunked-prefill") else None),
        hybrid_kv_cache=not (given("--disable-hybrid-kv-cache-manager") and _boolean(
            "--disable-hybrid-kv-cache-manager", options["--disable-hybrid-kv-cache-manager"])),
        context_overridden=any(given(f) for f in _CONTEXT_FLAGS),
        lora=_lora(options),
        lora_flags=frozenset(f for f in LORA_FLAGS if given(f)),
    )
