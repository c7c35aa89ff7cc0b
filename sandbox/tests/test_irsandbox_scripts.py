"""The sandbox's shell scripts pass shellcheck (they run as root and change the machine's network:
an unquoted variable there is a real hazard)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from irsandbox.common import SANDBOX_DIR


def test_sandbox_scripts_pass_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed: apt-get install -y shellcheck (make test "
                    "installs it)", pytrace=False)
    scripts = sorted(str(p) for p in [*SANDBOX_DIR.glob("*.sh"), *SANDBOX_DIR.glob("up.d/*.sh")])
    assert any(s.endswith("podnet.sh") for s in scripts)
    proc = subprocess.run([shellcheck, "-x", *scripts], cwd=SANDBOX_DIR.parent,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
