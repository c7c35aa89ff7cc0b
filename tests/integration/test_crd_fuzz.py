"""Fuzzed manifests (tests/manifest_mutations.py) against the CRD's schema and CEL rules on a real
API server (server-side dry run: validated, admitted, never stored), compared with the models.

Every rejection by the API server names a field.  Every manifest the API server admits, the
models accept (strictly, as the lints check a manifest) and parse as stored: the operator must
never meet a stored spec it cannot read.  Every manifest it refuses, the strict models refuse
too.  The models may refuse more only for rules the schema cannot express (``MODEL_ONLY``, with
the reason); anything else is a disagreement, counted and listed.  ``FUZZ_MANIFESTS`` sets the
count (default 150 here; ``make fuzz`` runs 10,000).
"""

from __future__ import annotations

import collections
import os
import re
from typing import Any

import pytest
from pydantic import ValidationError
from tests.manifest_mutations import json_safe, mutated

from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.core import validation
from irsandbox.control_plane import ControlPlane

pytestmark = pytest.mark.integration

MANIFESTS = max(150, int(os.environ.get("FUZZ_MANIFESTS", "150")))
NS = "fuzz"
#: Problems the models find and the schema cannot (why, each): the API server admits these, the
#: operator reports them as Valid=False and moves no traffic.
MODEL_ONLY = {
    # The pod template is kept exactly as written (x-kubernetes-preserve-unknown-fields: the
    # revision hash is over it), so the schema does not look inside it.
    r"^spec\.template\.": "the template is preserved as written, unvalidated by the schema",
    # CEL cannot compile a regular expression to see whether it is valid RE2.
    r"^spec\.traffic\.testers\.headers": "a tester header's RegularExpression must compile",
}
FIELD = re.compile(r"spec\.|metadata\.name|\bname\b")


def _model_problems(doc: dict[str, Any], strict: bool) -> list[str]:
    """Strict: the models as the lints apply them to a manifest (types as the schema checks
    them: "50", true, 50.0 are not integers).  Lax: as the operator reads a stored object."""
    try:
        InferenceRolloutSpec.model_validate(doc["spec"], strict=strict)
    except ValidationError as e:
        return validation.describe_validation_error(e)
    return []


def _server_verdict(client: Any, doc: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    """Admitted?, the refusal's message, and the object as the server would store it (nulls
    pruned, defaults applied: what the operator would read)."""
    r = client.post(f"/apis/rollouts.inference.dev/v1alpha1/namespaces/{NS}/inferencerollouts",
                    params={"dryRun": "All"}, json=doc)
    assert r.status_code in (201, 400, 422), (r.status_code, r.text[:500])
    return r.status_code == 201, r.json().get("message", ""), r.json()


def _where(message: str) -> str:
    """The first field a refusal names, indices dropped: one class per field."""
    found = re.search(r"spec(\.[\w/-]+|\[\d+\])+", message)
    return re.sub(r"\[\d+\]", "[]", found.group(0)) if found else message[:80]


def test_the_schema_and_the_models_agree(control_plane: ControlPlane) -> None:
    with control_plane.client() as client:
        client.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
        sent = admitted = rejected = model_only = 0
        disagreements: collections.Counter[str] = collections.Counter()
        examples: dict[str, tuple[int, list[str], str]] = {}
        unnamed: list[tuple[int, str]] = []
        seed = 0
        while sent < MANIFESTS:
            seed += 1
            doc, done = mutated(seed)
            if not json_safe(doc):
                continue  # inf/nan cannot be sent as JSON (the unit fuzz covers the models)
            doc = {**doc, "metadata": {**doc["metadata"], "namespace": NS}}
            sent += 1
            ok, message, stored = _server_verdict(client, doc)
            problems = _model_problems(stored if ok else doc, strict=True)
            if ok and not problems and _model_problems(stored, strict=False):
                problems = ["the operator cannot read the stored object"]
            if not ok:
                rejected += 1
                if not FIELD.search(message):
                    unnamed.append((seed, message[:200]))
            else:
                admitted += 1
            if ok and problems:
                if all(any(re.match(p, x) for p in MODEL_ONLY) for x in problems):
                    model_only += 1
                    continue
                key = "models refuse what the schema admits: " + _where(problems[0])
            elif not ok and not problems and "metadata.name" not in message:
                key = "the schema refuses what the models accept: " + _where(message)
            else:
                continue
            disagreements[key] += 1
            examples.setdefault(key, (seed, done, (problems or [message])[0][:200]))
    print(f"\nCRD fuzz: {sent} manifests, {admitted} admitted, {rejected} rejected, "
          f"{model_only} refused by the models only for template rules, "
          f"{sum(disagreements.values())} disagreements in {len(disagreements)} classes")
    for key, n in disagreements.most_common():
        print(f"  {n:5d}  {key}\n         e.g. seed {examples[key]}")
    assert not unnamed, f"rejections naming no field: {unnamed[:5]}"
    assert not disagreements, "schema and models disagree (listed above)"
