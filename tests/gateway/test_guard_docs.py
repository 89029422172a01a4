"""The examples on the guard's page run, and print what their comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DOCS

pytestmark = pytest.mark.timeout(90)

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
PAGE = DOCS / "gateway-guard.md"
BLOCKS = _BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def test_the_page_has_its_two_examples() -> None:
    assert len(BLOCKS) == 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_example_prints_what_it_promises(index: int, tmp_path: Path) -> None:
    code = BLOCKS[index]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=80, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    promised = [line.split("  # ", 1)[1].strip() for line in code.splitlines()
                if "print(" in line and "  # " in line]
    assert promised and proc.stdout.splitlines() == promised


def test_the_schema_example_is_a_valid_mcpsync_key(tmp_path: Path) -> None:
    from mcpsync.gateway._guard import read_guard_settings

    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## The `mcpsync` key")
    block = re.search(r"^```json\n(.*?)^```", text[start:], re.DOTALL | re.MULTILINE)
    assert block is not None
    path = tmp_path / "gateway.json"
    path.write_text(block.group(1), encoding="utf-8")
    settings = read_guard_settings(path)
    assert settings.policy is not None and settings.hold_seconds == 25
    assert settings.policy.require_approval == ("files/write_file",)
    assert not settings.policy.visible("files", "move_file")
    assert settings.policy.visible("files", "read_text_file")
