"""The approval page's examples: its Python blocks run as written, and its config blocks are
accepted by the config reader (the page is folded into the gateway page later; until then no
other docs test reads it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import DOCS

from mcpsync.gateway._guard._approval import HeldCall, approver_from_config
from mcpsync.gateway._guard._approvers._summary import summary

PAGE = DOCS / "gateway-approval.md"
_PYTHON = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_JSON = re.compile(r"^```json\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_python_examples_run(tmp_path: Path) -> None:
    blocks = _PYTHON.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "the page lost its examples"
    for code in blocks:
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr


def test_the_config_examples_are_accepted_and_the_summary_matches() -> None:
    blocks = [json.loads(b) for b in _JSON.findall(PAGE.read_text(encoding="utf-8"))]
    sections = [b["mcpsync"]["approval"] for b in blocks if "mcpsync" in b]
    assert len(sections) >= 4
    kinds = set()
    for section in sections:
        spec: Any = section.get("approver")
        if isinstance(spec, dict) and "command" in spec:   # the page's hook is not installed
            spec["command"] = [sys.executable, *spec["command"][1:]]
        approver = approver_from_config(section, str(PAGE))
        kinds.add(type(approver).__name__)
    assert kinds == {"TtyApprover", "WebApprover", "CommandApprover"}
    shown = [b for b in blocks if "mcpsync" not in b]
    assert len(shown) == 1
    assert set(shown[0]) == set(summary(HeldCall.of("files", "delete", {})))
