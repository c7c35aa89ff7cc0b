"""Which header routes the route holds beside its weighted split (docs/traffic.md).

A header route sends the requests that match it to one revision whatever the weights say, so it
is on only while the canary can answer and the release is open: from the canary's first Ready
pod (a tester's request must not meet a Service with no endpoints) until promotion, rollback or
deletion, which take every header route off in the same write that moves the weights.

* ``testers`` (``spec.traffic.testers``): the testers' requests go to the canary, at 0 % too,
  so they reach it before any weighted share (while the evaluation gate holds it at 0 %).
* ``sessions`` (``spec.traffic.sessionAffinity``): the split's answers set a cookie naming the
  revision, and a request carrying it goes back there.  Only while both revisions carry a
  share (0 < weight < 100): at 0 % nobody may be kept on the canary, and at 100 % nobody on a
  stable that is about to lose its pods.
"""

from __future__ import annotations

from ..api.spec import InferenceRolloutSpec
from ..api.status import InferenceRolloutStatus
from .types import NO_HEADER_ROUTES, HeaderRoute, Observation


def wanted(spec: InferenceRolloutSpec, status: InferenceRolloutStatus,
           world: Observation) -> frozenset[HeaderRoute]:
    traffic = spec.traffic
    if not traffic.matches_canary or status.canary_revision is None or status.aborted:
        return NO_HEADER_ROUTES
    if world.deleting or world.invalid:
        return NO_HEADER_ROUTES
    canary = world.revisions.get(status.canary_revision)
    if status.canary_weight == 0 and (canary is None or canary.ready == 0):
        return NO_HEADER_ROUTES
    out: set[HeaderRoute] = set()
    if traffic.testers is not None:
        out.add("testers")
    if traffic.session_affinity is not None and 0 < status.canary_weight < 100:
        out.add("sessions")
    return frozenset(out)
