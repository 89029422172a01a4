"""The HTTP front's page runs as written: its Python example serves the gateway over HTTP
and calls it in both eras (the page is folded into the gateway page later; until then no
other docs test reads it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import DOCS

PAGE = DOCS / "gateway-http.md"
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_example_runs(tmp_path: Path) -> None:
    blocks = _PYTHON.findall(PAGE.read_text(encoding="utf-8"))
    assert blocks, "the page lost its example"
    for code in blocks:
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "legacy done: 2 steps in 0.2 s [1, 2]" in proc.stdout
        assert "modern done: 2 steps in 0.2 s [1, 2]" in proc.stdout


def test_the_page_is_in_the_site() -> None:
    mkdocs = (Path(__file__).resolve().parents[2] / "mkdocs.yml").read_text()
    assert "gateway-http.md" in mkdocs
