"""Pytest hooks for every tier that runs on the sandbox (tests/sandbox, tests/e2e, tests/image):
a sandbox part that died is named, with its log, instead of surfacing as someone else's timeout.

Import both names into a conftest (pytest registers a conftest's fixtures and hooks by name):

    from irsandbox.pytest_sandbox import (  # noqa: F401
        pytest_runtest_makereport, sandbox_parts_alive)
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from . import components


@pytest.fixture(autouse=True)
def sandbox_parts_alive() -> None:
    """Before each test: every recorded sandbox part still runs, or the test fails naming it
    (a test that starts on a dead Traefik would only time out)."""
    dead = components.dead_components()
    if dead:
        pytest.fail(components.dead_report(dead), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]
                              ) -> Generator[None, Any, None]:
    """A test that failed while a sandbox part died under it says so in its own report."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        dead = components.dead_components()
        if dead:
            report.sections.append(("sandbox parts that died", components.dead_report(dead)))
