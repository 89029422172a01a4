"""Single sources: each of these facts is written in one module, and a check keeps it so.

The error codes live in ``mcpsync._codes``; threads are started through ``mcpsync._threads``.
The walks read the source with ``tokenize``/``ast``, so comments and docstrings that mention
a code (``-32602``) are fine, while a numeric literal in code is not.
"""

from __future__ import annotations

import ast
import io
import itertools
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "mcpsync"


def _sources() -> Iterator[Path]:
    yield from sorted(PACKAGE.rglob("*.py"))


def _is_error_code(value: int) -> bool:
    """The JSON-RPC reserved range (-32768..-32000) and MCP's codes inside it."""
    return 32000 <= value <= 32768


def _code_literals(path: Path) -> Iterator[tuple[int, str]]:
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    for before, tok in itertools.pairwise(tokens):
        if tok.type == tokenize.NUMBER and before.type == tokenize.OP and before.string == "-":
            try:
                value = int(tok.string, 0)
            except ValueError:
                continue
            if _is_error_code(value):
                yield tok.start[0], f"-{tok.string}"


def test_error_codes_are_written_only_in_the_code_table() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {text}"
             for path in _sources() if path.name != "_codes.py" or path.parent != PACKAGE
             for line, text in _code_literals(path)]
    assert found == [], "use the names of mcpsync._codes instead of:\n" + "\n".join(found)


def test_the_literal_check_sees_a_code_in_code_but_not_in_prose(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""-32602 in a docstring."""\n# -32601 in a comment\nX = -32022\n'
                      "Y = (1, -32700)\nZ = -1\n")
    assert list(_code_literals(sample)) == [(3, "-32022"), (4, "-32700")]


def test_the_code_table_imports_nothing() -> None:
    tree = ast.parse((PACKAGE / "_codes.py").read_text())
    imported = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                and not (isinstance(node, ast.ImportFrom) and node.module in ("__future__",
                                                                               "typing"))]
    assert imported == []


def test_jsonrpc_reexports_the_table_unchanged() -> None:
    from mcpsync import _codes, jsonrpc
    names = [n for n in jsonrpc.__all__ if n.isupper() and hasattr(_codes, n)]
    assert len(names) >= 13
    for name in names:
        assert getattr(jsonrpc, name) is getattr(_codes, name), name


# --- names --------------------------------------------------------------------------------

def test_one_name_rule_behind_every_public_alias() -> None:
    from mcpsync import _names, config
    from mcpsync.transport import base, stdio
    assert config.logger_name_part is _names.safe
    assert base.safe_name is _names.safe
    assert stdio.safe_name is _names.safe


def test_safe_replaces_everything_outside_ascii_word_characters() -> None:
    from mcpsync._names import safe
    assert safe("ok-Name_9") == "ok-Name_9"
    assert safe("my.server") == "my_server"
    assert safe("Café ☕") == "Caf___"
    assert safe("١٢") == "__"  # non-ASCII digits are not kept either
    assert safe("") == "_"


# --- threads ------------------------------------------------------------------------------


def _thread_constructions(path: Path) -> Iterator[int]:
    """Lines that call ``threading.Thread(...)`` or a bare ``Thread(...)``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "Thread"
                and isinstance(func.value, ast.Name) and func.value.id == "threading") \
                or (isinstance(func, ast.Name) and func.id == "Thread"):
            yield node.lineno


def test_threads_are_started_only_through_the_toolkit() -> None:
    found = [f"{rel}:{line}"
             for path in _sources()
             if (rel := path.relative_to(ROOT).as_posix()) != "mcpsync/_threads.py"
             for line in _thread_constructions(path)]
    assert found == [], "start threads with mcpsync._threads.spawn/new_thread:\n" + \
        "\n".join(found)


def test_the_thread_check_sees_both_spellings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import threading\nfrom threading import Thread\n"
                      "a = threading.Thread(target=print)\nb = Thread(target=print)\n"
                      "c = threading.Event()\n")
    assert list(_thread_constructions(sample)) == [3, 4]


# --- the package's public names -------------------------------------------------------------

def _type_checking_imports() -> dict[str, str]:
    """name -> module of every ``from m import X as X`` under ``if TYPE_CHECKING:``."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.dump(stmt)
                for alias in stmt.names:
                    assert alias.asname == alias.name, f"{alias.name} must be re-exported as itself"
                    assert alias.name not in found, f"{alias.name} is imported twice"
                    found[alias.name] = stmt.module
    return found


def test_the_type_checking_block_matches_the_public_dict() -> None:
    import mcpsync
    public: dict[str, str] = mcpsync._PUBLIC  # type: ignore[attr-defined]
    assert _type_checking_imports() == public
    assert mcpsync.__all__ == ["__version__", *sorted(public)]
    assert set(public) <= set(dir(mcpsync))


def test_every_public_name_loads_from_its_module() -> None:
    import importlib

    import mcpsync
    public: dict[str, str] = mcpsync._PUBLIC  # type: ignore[attr-defined]
    for name, module in public.items():
        assert getattr(mcpsync, name) is getattr(importlib.import_module(module), name), name
