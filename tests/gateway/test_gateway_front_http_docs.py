"""The HTTP front's page runs as written: its Python examples serve the gateway over HTTP,
call it in both eras and show a budget per legacy session (the page is folded into the
gateway page later; until then no other docs test reads it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import DOCS

PAGE = DOCS / "gateway-http.md"
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


#: What each example of the page prints, in order of the page.
_PRINTS = [
    ["legacy done: 2 steps in 0.2 s [1, 2]", "modern done: 2 steps in 0.2 s [1, 2]"],
    ["first ['add', 'echo', 'slow']", "first refused by budgets['*']",
     "second ['add', 'echo', 'slow']", "second refused by budgets['*']"],
]


def test_the_examples_run(tmp_path: Path) -> None:
    blocks = _PYTHON.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == len(_PRINTS), "the page's examples changed"
    for code, prints in zip(blocks, _PRINTS, strict=True):
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == prints


def test_the_page_is_in_the_site() -> None:
    mkdocs = (Path(__file__).resolve().parents[2] / "mkdocs.yml").read_text()
    assert "gateway-http.md" in mkdocs
