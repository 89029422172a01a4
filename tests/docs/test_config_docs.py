"""Every complete Python example in ``docs/config.md`` runs as written.

The same rule as ``tests/docs/test_docs.py``: a block is skipped only when it is visibly a fragment
(a line that is just ``...`` or ``...`` as an argument). Each example runs in a fresh
interpreter with an empty working directory (and ``TMPDIR``), so it cannot lean on the
test's state and leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DOCS

DOC = DOCS / "config.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _is_fragment(code: str) -> bool:
    return any(line.strip() == "..." or "=..." in line.replace(" ", "")
               for line in code.splitlines())


def _examples() -> list[tuple[str, str]]:
    blocks = _BLOCK.findall(DOC.read_text(encoding="utf-8"))
    return [(f"config.md#{index}", code) for index, code in enumerate(blocks, 1)
            if not _is_fragment(code)]


def test_the_doc_has_examples() -> None:
    assert len(_examples()) >= 5


@pytest.mark.parametrize(("where", "code"), _examples(), ids=[w for w, _ in _examples()])
def test_config_doc_example_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout}\n{proc.stderr}"
