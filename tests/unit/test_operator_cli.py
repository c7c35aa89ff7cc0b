"""The operator's command line: the tenancy flags reach the reconciler's settings, and a bad
allow-list entry stops the operator before it starts (a typo must not mean "allow nothing" or
"allow anything" silently)."""

from __future__ import annotations

import pytest

from inference_rollout import __main__ as cli


def test_tenancy_flags_reach_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    from inference_rollout import handlers

    started: list[bool] = []
    # Everything run_operator sets is restored afterwards; kopf itself is not started.
    monkeypatch.setattr("kopf.configure", lambda **kw: None)
    monkeypatch.setattr("kopf.operator", lambda **kw: started.append(True))
    monkeypatch.setattr("asyncio.run", lambda coro: None)
    for name in ("prometheus_allow", "confine_queries", "kubeconfig", "metrics_port",
                 "service_proxy", "clusterwide"):
        monkeypatch.setattr(handlers.Runtime, name, getattr(handlers.Runtime, name))
    assert cli.main(["operator", "-A", "--prometheus-allow", "http://prometheus:9090",
                     "--confine-queries"]) == 0
    assert handlers.Runtime.prometheus_allow == ("http://prometheus:9090",)
    assert handlers.Runtime.confine_queries is True
    assert started == [True]


def test_a_bad_allow_list_entry_stops_the_operator(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["operator", "-A", "--prometheus-allow", "prometheus:9090"])
    assert e.value.code == 2
    assert "--prometheus-allow 'prometheus:9090': not a base URL" in capsys.readouterr().err
