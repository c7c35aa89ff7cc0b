"""The operator's command line: the tenancy flags reach the reconciler's settings, and a bad
allow-list entry stops the operator before it starts (a typo must not mean "allow nothing" or
"allow anything" silently); the defaults are the secure ones, the opt-outs explicit."""

from __future__ import annotations

import pytest

from inference_rollout import __main__ as cli
from inference_rollout.handlers import Runtime


def run_flags(monkeypatch: pytest.MonkeyPatch, *flags: str) -> type[Runtime]:
    """``inference-rollout operator -A FLAGS``, kopf not started; the Runtime it configured."""
    from inference_rollout import handlers

    started: list[bool] = []
    # Everything run_operator sets is restored afterwards; kopf itself is not started.
    monkeypatch.setattr("kopf.configure", lambda **kw: None)
    monkeypatch.setattr("kopf.operator", lambda **kw: started.append(True))
    monkeypatch.setattr("asyncio.run", lambda coro: None)
    for name in ("prometheus_allow", "prometheus_allow_any", "confine_queries", "kubeconfig",
                 "metrics_port", "service_proxy", "clusterwide"):
        monkeypatch.setattr(handlers.Runtime, name, getattr(handlers.Runtime, name))
    assert cli.main(["operator", "-A", *flags]) == 0
    assert started == [True]
    return handlers.Runtime


def test_tenancy_flags_reach_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = run_flags(monkeypatch, "--prometheus-allow", "http://prometheus:9090",
                   "--confine-queries")
    assert rt.prometheus_allow == ("http://prometheus:9090",)
    assert rt.confine_queries is True and rt.prometheus_allow_any is False


def test_secure_by_default_nothing_allowed_and_queries_confined(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    rt = run_flags(monkeypatch)
    assert rt.prometheus_allow == () and rt.prometheus_allow_any is False
    assert rt.confine_queries is True
    assert "no Prometheus address is allowed" in caplog.text
    assert "--prometheus-allow URL" in caplog.text and "--prometheus-allow-any" in caplog.text


def test_the_opt_outs_are_explicit(monkeypatch: pytest.MonkeyPatch,
                                   caplog: pytest.LogCaptureFixture) -> None:
    rt = run_flags(monkeypatch, "--prometheus-allow-any", "--no-confine-queries")
    assert rt.prometheus_allow_any is True and rt.confine_queries is False
    assert "no Prometheus address is allowed" not in caplog.text


def test_an_allow_list_and_allow_any_together_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["operator", "-A", "--prometheus-allow", "http://p:9090",
                  "--prometheus-allow-any"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_bad_allow_list_entry_stops_the_operator(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["operator", "-A", "--prometheus-allow", "prometheus:9090"])
    assert e.value.code == 2
    assert "--prometheus-allow 'prometheus:9090': not a base URL" in capsys.readouterr().err
