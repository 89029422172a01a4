"""The README's first example runs as written, and its third-party example calls a real
npm server (``server-everything``, as ``npx`` would start it, here from the copy installed
for the tests under Node 22)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import ROOT
from http_peers.everything import EverythingServer

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks() -> list[str]:
    return _BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_first_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "first.py"
    script.write_text(_blocks()[0], encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["['echo', 'add', 'slow', 'fail']", "{'sum': 3}"]


def test_the_third_party_example_names_a_real_server(everything_server: EverythingServer
                                                    ) -> None:
    """The npx call's tool and argument exist on that server (reached here over HTTP)."""
    import mcpsync

    code = _blocks()[1]
    assert 'mcpsync.connect(["npx", "-y", "@modelcontextprotocol/server-everything"])' in code
    with mcpsync.connect(everything_server.url) as client:
        assert client.call_tool("echo", {"message": "hello"}).text == "Echo: hello"
