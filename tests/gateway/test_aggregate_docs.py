"""The example on the aggregation page runs and prints what its comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from helpers import DOCS

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_aggregation_example_prints_what_it_promises(tmp_path: Path) -> None:
    code = _BLOCK.findall((DOCS / "gateway-aggregation.md").read_text(encoding="utf-8"))[0]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    promised = [line.split("# ", 1)[1].strip() for line in code.splitlines()
                if line.startswith("print(")]
    assert proc.stdout.splitlines() == promised
