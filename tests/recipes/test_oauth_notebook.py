"""The OAuth notebook recipe runs in a real Jupyter kernel, logging in with a device code.

nbclient runs ``examples/recipes/oauth_notebook.ipynb`` against the MCP test server guarded
by the authlib authorization server. The person is a thread of the test that waits for the
device authorization to reach the server and approves its code, as someone typing it on a
phone would. The login cell must show that code and URL, and the next cells call the tools.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from auth_peers.fixtures import ProtectedMCP
from nbclient import NotebookClient

from recipes._run import RECIPES

NOTEBOOK = RECIPES / "oauth_notebook.ipynb"


def _approve_first_device_code(protected: ProtectedMCP, done: threading.Event) -> None:
    deadline = time.monotonic() + 60
    while not protected.auth.device_authorizations and time.monotonic() < deadline:
        if done.wait(0.05):
            return
    if protected.auth.device_authorizations:
        protected.auth.approve_device(protected.auth.device_authorizations[0].user_code)


def _stream(cell: Any) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.outputs
                   if o["output_type"] == "stream")


@pytest.mark.timeout(120)
def test_the_notebook_logs_in_with_a_device_code(
        protected_mcp: ProtectedMCP, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_URL", protected_mcp.url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))   # the kernel's token file
    nb = nbformat.read(NOTEBOOK, as_version=4)
    done = threading.Event()
    person = threading.Thread(target=_approve_first_device_code, name="test-device-person",
                              args=(protected_mcp, done), daemon=True)
    person.start()
    try:
        NotebookClient(nb, timeout=60, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        done.set()
        person.join(10)
    code = [c for c in nb.cells if c.cell_type == "code"]
    [record] = protected_mcp.auth.device_authorizations
    login_output = _stream(code[1])
    assert record.user_code in login_output and protected_mcp.auth.issuer in login_output
    tools = code[2].outputs[0]["data"]["text/plain"]
    assert "'echo'" in tools and "'add'" in tools
    assert code[3].outputs[0]["data"]["text/plain"] == "'from a notebook'"
    assert (tmp_path / "mcpauth" / "tokens.json").stat().st_mode & 0o777 == 0o600
