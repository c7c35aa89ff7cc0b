"""The gateway's access log read back for a failed burst (irsandbox.gateway_log)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from irsandbox.gateway_log import failures_between


def line(host: str, at: float, status: int = 502, addr: str = "10.244.0.9:8000") -> str:
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"StartUTC": stamp, "RequestHost": host, "DownstreamStatus": status,
                       "ServiceName": "httproute-ns-del-gw-ep-web-0-1c0cf8e3c0cd7e4f9a0b-wrr",
                       "ServiceAddr": addr})


def test_counts_the_hosts_failures_inside_the_window_by_backend(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    t = 1_800_000_000.0
    log.write_text("\n".join([
        line("del.test", t + 1), line("del.test", t + 2), line("del.test", t + 2, addr="x:1"),
        line("other.test", t + 1),          # another route's failure
        line("del.test", t - 30),            # long before the burst
        "not json",
    ]) + "\n")
    got = failures_between("del.test", t, t + 3, log)
    assert got == {
        "502 httproute-ns-del-gw-ep-web-0-1c0cf8e3c0cd7e4f9a0b-wrr -> 10.244.0.9:8000": 2,
        "502 httproute-ns-del-gw-ep-web-0-1c0cf8e3c0cd7e4f9a0b-wrr -> x:1": 1}


def test_no_log_is_no_evidence(tmp_path: Path) -> None:
    assert failures_between("del.test", 0, 1, tmp_path / "missing.log") == {}
