"""Every complete Python example in the user docs runs as written.

The docs promise runnable examples. A block is skipped only when it is visibly a fragment:
it contains a line that is just ``...`` or uses ``...`` as an argument placeholder. The docs
that have their own example tests (types, wire, server) are covered there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DOCS

CHECKED = ("client.md", "processes.md", "performance.md", "auth.md", "architecture.md",
           "errors.md", "index.md", "rough-edges.md", "notebooks.md", "gateway.md",
           "gateway-bridging.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _is_fragment(code: str) -> bool:
    return any(line.strip() == "..." or "=..." in line.replace(" ", "")
               for line in code.splitlines())


def _examples() -> list[tuple[str, str]]:
    found = []
    for name in CHECKED:
        path = DOCS / name
        if not path.exists():
            continue
        for index, code in enumerate(_BLOCK.findall(path.read_text(encoding="utf-8")), 1):
            if not _is_fragment(code):
                found.append((f"{name}#{index}", code))
    return found


@pytest.mark.parametrize(("where", "code"), _examples(), ids=[w for w, _ in _examples()])
def test_doc_example_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout}\n{proc.stderr}"


def _block_under(name: str, heading: str) -> str:
    """The first Python block after ``heading`` in ``docs/<name>`` (for pages whose other
    blocks need a live server)."""
    text = (DOCS / name).read_text(encoding="utf-8")
    start = text.index(heading)
    match = _BLOCK.search(text, start)
    assert match is not None, f"no Python block under {heading!r} in {name}"
    return match.group(1)


@pytest.mark.parametrize(("name", "heading"), [
    ("http.md", "### Credentials belong to one server"),
])
def test_doc_example_under_a_heading_runs(name: str, heading: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_block_under(name, heading), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, f"{name} {heading} failed:\n{proc.stdout}\n{proc.stderr}"
