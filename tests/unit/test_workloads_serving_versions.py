"""A serving version's Service (a rollout with adapters, docs/adapters.md): what the operator
writes, and what it reads back as ``core.serving_versions.ServingVersionFacts``."""

from __future__ import annotations

import copy

import pytest

from inference_rollout.api import (
    ANN_SERVING_ADAPTERS,
    ANN_SERVING_PODS,
    LABEL_ADAPTER_SET,
    LABEL_REVISION,
    LABEL_ROLLOUT,
)
from inference_rollout.core.adapter_plan import set_id
from inference_rollout.core.serving_versions import ServingVersionFacts
from inference_rollout.workloads.revisions import (
    service_body,
    version_service_body,
    versions_from_services,
)

ADAPTERS = {"support": "s3://adapters/support/v7", "code": "s3://adapters/code/v3"}
FACTS = ServingVersionFacts(template="t1t1t1t1t1", adapter_set=set_id(ADAPTERS), pods=2,
                            adapters=ADAPTERS)


def test_a_versions_service_is_named_by_the_version_and_selects_its_templates_admitted_pods(
) -> None:
    svc = version_service_body("serving", "chat", "uid-1", "s2s2s2s2s2", FACTS, 8000)
    assert svc["metadata"]["name"] == "chat-s2s2s2s2s2"  # the route's backend
    assert svc["metadata"]["labels"][LABEL_REVISION] == "s2s2s2s2s2"
    assert svc["spec"]["selector"] == {LABEL_ROLLOUT: "chat", LABEL_REVISION: "t1t1t1t1t1",
                                       LABEL_ADAPTER_SET: set_id(ADAPTERS)}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000}]
    (owner,) = svc["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-1"


def test_what_is_written_is_what_is_read_back() -> None:
    svc = version_service_body("serving", "chat", "uid-1", "s2s2s2s2s2", FACTS, 8000)
    assert versions_from_services([svc]) == {"s2s2s2s2s2": FACTS}


def test_a_template_revisions_service_is_not_a_serving_version() -> None:
    assert versions_from_services([service_body("serving", "chat", "u", "t1t1t1t1t1", 8000),
                                   service_body("serving", "chat", "u", "t1t1t1t1t1", 8000,
                                                adapter_set="aaaaaaaaaa")]) == {}


@pytest.mark.parametrize("edited", ["-1", "two", "", "1e3", " 2", "9" * 5000, "\u0662"])
def test_a_pod_count_edited_into_something_else_reads_as_none_asked(edited: str) -> None:
    svc = version_service_body("serving", "chat", "u", "s2s2s2s2s2", FACTS, 8000)
    svc["metadata"]["annotations"][ANN_SERVING_PODS] = edited
    assert versions_from_services([svc])["s2s2s2s2s2"].pods == 0


def test_a_service_being_deleted_is_gone_already() -> None:
    svc = version_service_body("serving", "chat", "u", "s2s2s2s2s2", FACTS, 8000)
    gone = copy.deepcopy(svc)
    gone["metadata"]["deletionTimestamp"] = "2026-12-07T12:00:00Z"
    assert versions_from_services([gone]) == {}


@pytest.mark.parametrize("edited", [
    '{"support": "s3://adapters/support/v8", "code": "s3://adapters/code/v3"}',  # another set
    '{"support": 7}', "[]", "not json", None, "[" * 15000, '{"x": "' + "y" * 20000 + '"}'])
def test_adapters_that_do_not_hash_to_the_set_are_not_trusted(edited: str | None) -> None:
    """A rollback loads the stable's set from its Service: a record edited by hand (or lost)
    must not be loaded into the pods as if it were that set."""
    svc = version_service_body("serving", "chat", "u", "s2s2s2s2s2", FACTS, 8000)
    if edited is None:
        del svc["metadata"]["annotations"][ANN_SERVING_ADAPTERS]
    else:
        svc["metadata"]["annotations"][ANN_SERVING_ADAPTERS] = edited
    facts = versions_from_services([svc])["s2s2s2s2s2"]
    assert facts.adapters is None and facts.adapter_set == set_id(ADAPTERS)
