"""The examples in examples/ run as documented (quickstart.py is run in test_client_basic)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


@pytest.mark.timeout(60)
def test_manager_example_runs_and_leaves_no_secret_file(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path))
    env.pop("GREETING", None)
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "manager.py")],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "started: {'demo': True, 'vaulted': True}"
    assert "vaulted__echo" in lines[1] and "demo__fail" in lines[1]
    assert "demo/fail -> refused locally (PolicyDenied, gateway code -32010)" in lines
    assert "vaulted/slow -> refused locally (ApprovalRejected, gateway code -32011)" in lines
    assert "vaulted/echo -> refused locally (BudgetExceeded, gateway code -32012)" in lines
    assert lines[-1] == ("server log messages: [('demo', 'slow: step 1/2'), "
                         "('demo', 'slow: step 2/2')]")
    assert "value-of-vault:demo" not in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("mcpsync-secret-*"))     # the secret file is gone
