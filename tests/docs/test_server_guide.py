"""Every Python example in ``docs/server.md`` runs as written and prints what the page says.

The server guide promises runnable examples, so each ``python`` block (indented ones too) is
saved under the file name its first comment gives (``# notes_server.py: ...``) and run in a
fresh folder as its own process, with every named block of the page beside it (the client
snippet under the calculator imports nothing but talks to ``calc_server.py``). When every
``print()`` of a block carries a comment, the printed lines must be exactly those comments, in
order: the comment is what a reader expects to see. A block that only serves (it calls
``serve()``) is started as a real stdio server and listed by a client, since run on its own it
would just wait for input. Fragments (a line that is only ``...``) would be skipped, but the
page has none, and the number of examples is pinned from below so that a change in how blocks
are found cannot silently run nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import DOCS

import mcpsync

PAGE = DOCS / "server.md"
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
_NAME = re.compile(r"#\s*([\w-]+\.py)\b")
_HEADING = re.compile(r"^#{2,4} (.+)$", re.MULTILINE)
_COMMENT = "  # "


def _blocks() -> list[tuple[str, str]]:
    """``(label, source)`` of every Python block of the page, dedented, in page order."""
    text = PAGE.read_text(encoding="utf-8")
    found = []
    for index, match in enumerate(_BLOCK.finditer(text), 1):
        source = textwrap.dedent(match.group(2))
        if any(line.strip() == "..." for line in source.splitlines()):
            continue   # a visible fragment
        first = source.splitlines()[0] if source.strip() else ""
        name = _NAME.match(first)
        found.append((name.group(1) if name else f"block-{index}", source))
    return found


def _expected(source: str) -> list[str] | None:
    """The comments beside the ``print()`` calls, or ``None`` when one has none."""
    prints = [line for line in source.splitlines() if line.lstrip().startswith("print(")]
    if not prints or any(_COMMENT not in line for line in prints):
        return None
    return [line.rsplit(_COMMENT, 1)[1] for line in prints]


def _env() -> dict[str, str]:
    # The pages' examples must not depend on a state key the reader happens to have set.
    return {k: v for k, v in os.environ.items() if k != "MCPSYNC_STATE_KEY"}


def _write_all(folder: Path) -> None:
    for label, source in _blocks():
        if label.endswith(".py"):
            (folder / label).write_text(source, encoding="utf-8")


BLOCKS = _blocks()


def test_the_page_has_its_examples() -> None:
    labels = [label for label, _ in BLOCKS]
    assert len(BLOCKS) >= 13, labels
    for name in ("calc_server.py", "shop.py", "plugins.py", "gallery.py", "notes_server.py",
                 "writer.py", "travel.py", "sealed_state.py", "gatekeeper.py", "worker.py",
                 "late.py", "bounded_server.py"):
        assert name in labels
    # most of them say what they print, so the run below checks their output too
    assert sum(_expected(source) is not None for _, source in BLOCKS) >= 10


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("label", "source"), BLOCKS, ids=[label for label, _ in BLOCKS])
def test_server_guide_example_runs(label: str, source: str, tmp_path: Path) -> None:
    _write_all(tmp_path)
    script = tmp_path / (label if label.endswith(".py") else "example.py")
    script.write_text(source, encoding="utf-8")
    if "serve()" in source:
        # a server: run it for real over stdio and look at it from a client
        with mcpsync.connect([sys.executable, str(script)], cwd=str(tmp_path),
                             env=_env()) as client:
            assert client.list_tools(), f"{label} serves no tools"
        return
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=_env(), stdin=subprocess.DEVNULL,
                          check=False)
    assert proc.returncode == 0, f"{label} failed:\n{proc.stdout}\n{proc.stderr}"
    expected = _expected(source)
    if expected is not None:
        assert proc.stdout.splitlines() == expected, label


def test_run_with_a_bad_http_address_says_what_it_expected(tmp_path: Path) -> None:
    _write_all(tmp_path)
    code = "from calc_server import server\nserver.run(['--http', 'nowhere'])\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, cwd=tmp_path, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "HOST:PORT" in proc.stderr and "--http nowhere" in proc.stderr
    assert "exits with status 2" in PAGE.read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (lower case, punctuation dropped)."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_every_link_to_a_section_of_the_page_lands() -> None:
    page = PAGE.read_text(encoding="utf-8")
    anchors = {_slug(h) for h in _HEADING.findall(page)}
    own = re.findall(r"\]\(#([^)]+)\)", page)
    assert len(own) >= 10
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    from_index = re.findall(r"\]\(server\.md#([^)]+)\)", index)
    assert from_index, "docs/index.md links no section of server.md"
    missing = sorted(set(own + from_index) - anchors)
    assert not missing, f"links to sections server.md does not have: {missing}"
