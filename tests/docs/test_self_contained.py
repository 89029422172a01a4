"""The project explains itself: no code, page or test points at documents it does not ship.

Design notes and behaviour contracts live in ``docs/`` (``docs/architecture.md`` and the
user pages). A citation of a rule file, a section number of one, a relative path out of the
repository or a nickname for a planning document would send a reader somewhere they cannot
follow, so this test keeps them out of the packages, ``docs/``, ``examples/``, the README and
the docstrings of the tests. "The issue" is ordinary English in prose, so it is refused only in
Python comments, where it has always meant a tracker entry.

The patterns are assembled from pieces, so this file can be scanned like any other.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from helpers import ROOT

_SECTION = "\u00a7"
_THE = r"\bthe "
FORBIDDEN = re.compile("|".join((
    "rules ?" + _SECTION,                 # a section of an outside rule file
    "rules/[a-z_-]+" + r"\.md",           # a rule file by path
    r"\.\./" + "shared",                  # a path out of the repository
    _THE + "seed" + r"\b",                # a nickname for the original design
    _THE + "brief" + r"\b",               # a nickname for a task description
    r"\bfrom the [A-Za-z-]+ " + "issue on",  # the tracker's history, not the reader's
)), re.IGNORECASE)
COMMENT_ONLY = re.compile(_THE + "issue" + r"\b", re.IGNORECASE)

TEXT_TREES = ("mcpsync", "mcpauth", "docs", "examples")
TEXT_FILES = ("README.md",)
COMMENT_TREES = ("mcpsync", "mcpauth", "tests", "examples")
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def _files(tree: Path, pattern: str = "*") -> Iterator[Path]:
    if not tree.is_dir():
        return
    for path in sorted(tree.rglob(pattern)):
        if path.is_file() and not _SKIP_DIRS.intersection(path.relative_to(tree).parts):
            yield path


def _text(path: Path) -> str | None:
    """The file as text, or ``None`` for a binary file (nothing a reader would follow)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def text_hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: text`` for every forbidden reference anywhere in a text file."""
    text = _text(path)
    if text is None:
        return []
    return [f"{path.relative_to(root)}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1) if FORBIDDEN.search(line)]


def _docstrings(source: str) -> Iterator[tuple[int, str]]:
    """``(first line, text)`` of the module's, and every class's and function's, docstring."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
            continue
        body = node.body
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            yield body[0].value.lineno, body[0].value.value


def docstring_hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: text`` for every forbidden reference in a Python file's docstrings."""
    found = sorted((first + offset, line.strip())
                   for first, doc in _docstrings(path.read_text(encoding="utf-8"))
                   for offset, line in enumerate(doc.splitlines()) if FORBIDDEN.search(line))
    return [f"{path.relative_to(root)}:{n}: {line}" for n, line in found]


def comment_hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: text`` for every "the issue" in a Python file's ``#`` comments."""
    source = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(root)}:{tok.start[0]}: {tok.string.strip()}"
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT and COMMENT_ONLY.search(tok.string)]


def _report(hits: list[str], what: str) -> str:
    return (f"{len(hits)} {what} pointing outside the repository; say the thing, or cite "
            "a page under docs/ by its heading:\n" + "\n".join(hits))


def test_packages_docs_examples_and_readme_cite_only_the_repository() -> None:
    scanned = [path for tree in TEXT_TREES for path in _files(ROOT / tree)]
    scanned += [ROOT / name for name in TEXT_FILES if (ROOT / name).is_file()]
    assert len(scanned) > 50, "the scan found too few files: is ROOT right?"
    hits = [hit for path in scanned for hit in text_hits(path)]
    assert not hits, _report(hits, "references")


def test_test_docstrings_cite_only_the_repository() -> None:
    scanned = list(_files(ROOT / "tests", "*.py"))
    assert len(scanned) > 20
    hits = [hit for path in scanned for hit in docstring_hits(path)]
    assert not hits, _report(hits, "docstring references")


def test_comments_never_cite_a_tracker_entry_as_the_reason() -> None:
    scanned = [path for tree in COMMENT_TREES for path in _files(ROOT / tree, "*.py")]
    hits = [hit for path in scanned for hit in comment_hits(path)]
    assert not hits, _report(hits, "comments")


# -- the scanner itself finds what it must, and nothing it must not ---------------------------

def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_text_scan_reports_each_pattern_with_its_line(tmp_path: Path) -> None:
    lines = ["fine", "see rules " + _SECTION + "4", "in RULES/http" + ".md",
             "read ../" + "shared/bench", "The " + "seed gateway", "as the " + "brief says",
             "the issuer is exact", "the issue is ordinary prose in docs"]
    path = _write(tmp_path, "page.md", "\n".join(lines) + "\n")
    hits = text_hits(path, tmp_path)
    assert [hit.split(":")[1] for hit in hits] == ["2", "3", "4", "5", "6"]
    assert all(hit.startswith("page.md:") for hit in hits)


def test_binary_files_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\xff\xfe rules " + _SECTION.encode("utf-8") + b"1")
    assert text_hits(path, tmp_path) == []


def test_docstring_scan_reads_module_class_and_function_docstrings_only(
        tmp_path: Path) -> None:
    ref = "rules " + _SECTION + "9"
    source = (f'"""Module.\n\nSecond line ({ref})."""\n'
              f'X = "{ref} in a string literal is not a docstring"\n'
              f'class C:\n    """Class ({ref})."""\n'
              f'    def m(self) -> None:\n        """Method ({ref})."""\n'
              f'async def f() -> None:\n    """Coroutine ({ref})."""\n')
    path = _write(tmp_path, "test_x.py", source)
    assert [hit.split(":")[1] for hit in docstring_hits(path, tmp_path)] == ["3", "6", "8", "10"]


def test_comment_scan_reads_comments_not_strings(tmp_path: Path) -> None:
    phrase = "the " + "issue"
    source = (f'MESSAGE = "{phrase} is fine in a string"\n'
              f"# {phrase.capitalize()} asked for this\n"
              "# the issuer must match\n"
              f"x = 1  # as {phrase} said\n")
    path = _write(tmp_path, "mod.py", source)
    assert [hit.split(":")[1] for hit in comment_hits(path, tmp_path)] == ["2", "4"]
