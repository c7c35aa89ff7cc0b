"""``status.adapterPods`` (core/serving_versions.adapter_pods): what each pod serves, read from
the pod itself, so the status shows the truth after any crash (docs/adapters.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from inference_rollout.api.spec import MAX_ADAPTER_SOURCE, MAX_ADAPTERS
from inference_rollout.api.status import MAX_ADAPTER_PODS, AdapterPod, InferenceRolloutStatus
from inference_rollout.core.adapter_plan import PodAdapters, set_id
from inference_rollout.core.serving_versions import adapter_pods

V1 = {"support": "s3://adapters/support/v1"}
V2 = {"support": "s3://adapters/support/v2"}
S1, S2 = set_id(V1), set_id(V2)
SETS = {S1: V1, S2: V2}
VERSIONS = {S1: "a1a1a1a1a1", S2: "b2b2b2b2b2"}
T0 = datetime(2026, 12, 7, tzinfo=UTC)


def pod(name: str, label: str | None, loaded: dict[str, str] | None,
        started: datetime = T0) -> PodAdapters:
    return PodAdapters(name, serving=loaded is not None, loaded=loaded, label=label,
                       admitted=label is not None, moved_at=T0, container_started_at=started,
                       verified_start=T0)


def test_each_pod_shows_the_version_selecting_it_and_what_it_itself_serves() -> None:
    pods = [pod("p-2", None, {**V2, "other-team": "x"}),  # moving: in no Service
            pod("p-1", S2, V2), pod("p-0", S1, V1), pod("p-3", S1, None)]  # p-3: no answer
    assert adapter_pods(pods, SETS, VERSIONS) == [
        AdapterPod(pod="p-0", version=VERSIONS[S1], adapters=V1),
        AdapterPod(pod="p-1", version=VERSIONS[S2], adapters=V2),
        AdapterPod(pod="p-2", version=None, adapters=V2),  # only the adapters it manages
        AdapterPod(pod="p-3", version=VERSIONS[S1], adapters=None)]


def test_a_pod_restarted_under_its_label_shows_it_serves_nothing_until_taken_out() -> None:
    restarted = pod("p-0", S2, {}, started=T0 + timedelta(minutes=1))
    assert restarted.stale
    assert adapter_pods([restarted], SETS, VERSIONS) == [
        AdapterPod(pod="p-0", version=VERSIONS[S2], adapters={})]


def test_the_list_is_bounded_and_survives_the_status_round_trip() -> None:
    many = [pod(f"p-{i:04d}", S1, V1) for i in range(MAX_ADAPTER_PODS + 10)]
    listed = adapter_pods(many, SETS, VERSIONS)
    assert len(listed) == MAX_ADAPTER_PODS and listed[0].pod == "p-0000"
    status = InferenceRolloutStatus(adapter_pods=listed)
    assert InferenceRolloutStatus.parse(status.to_body()).adapter_pods == listed
    assert InferenceRolloutStatus().to_body()["adapterPods"] is None  # no adapters: nothing


def test_what_a_pod_reports_is_cut_to_the_status_schemas_bounds() -> None:
    """A pod runs a tenant's image: a source longer than any the spec accepts is shown cut, and
    no more names than two sets can hold are listed, so the status always validates."""
    many = {f"a{i:02d}": "s3://x" for i in range(20)}
    sets = {"s1": dict(list(many.items())[:10]), "s2": dict(list(many.items())[10:])}
    long = pod("p-0", None, {**many, "a00": "s3://" + "x" * 5000})
    (row,) = adapter_pods([long], sets, {})
    assert row.adapters is not None and len(row.adapters) == 2 * MAX_ADAPTERS
    assert len(row.adapters["a00"]) == MAX_ADAPTER_SOURCE and row.adapters["a00"].endswith("…")
    assert InferenceRolloutStatus.parse(
        InferenceRolloutStatus(adapter_pods=[row]).to_body()).adapter_pods == [row]
