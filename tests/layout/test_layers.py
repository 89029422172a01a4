"""The import contract: which part of the packages may import which.

The layers, lowest first; a module may import its own layer and lower ones, never a higher
one. Imports inside functions count too (a lazy import is still a dependency), except under
``if TYPE_CHECKING:``, which never runs. The walk uses ``ast``, so nothing is imported.

    0  mcpsync.errors (and an error-code table if there is one), _version
    1  flat core helpers: jsonrpc, _jsonscan, types, _display, config, _urls, secrets, ...
    2  protocol
    3  transport.base (the contract every transport fills, which the session relies on)
    4  session
    5  transport.stdio, transport.http, transport.sse, transport.memory
    6  client
    7  manager, server, cli, demo, __main__

Beside the order: a transport never reaches into another transport's private modules (the
shared pieces live in transport.base and transport.sse); mcpauth never imports mcpsync; and
mcpsync imports mcpauth only inside functions, and only from the modules that wire OAuth in.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from helpers import ROOT

LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (0, ("mcpsync.errors", "mcpsync._codes", "mcpsync._version", "mcpsync._fields_eq")),
    (1, ("mcpsync.jsonrpc", "mcpsync._jsonscan", "mcpsync._envelope", "mcpsync.types",
         "mcpsync._types_more", "mcpsync._frame_io",
         "mcpsync._gateway_refusal",
         "mcpsync.config", "mcpsync._config_http",
         "mcpsync.config_files", "mcpsync._urls", "mcpsync._origin", "mcpsync._names",
         "mcpsync._threads", "mcpsync._parallel", "mcpsync.secrets", "mcpsync._secret_dirs",
         "mcpsync.policy",
         "mcpsync._budget_ledger",
         "mcpsync.auth_hooks", "mcpsync._config_oauth", "mcpsync._mcpauth_import",
         "mcpsync._display", "mcpsync._printable")),
    (2, ("mcpsync.protocol",)),
    (3, ("mcpsync.transport.base", "mcpsync.transport")),
    (4, ("mcpsync.session",)),
    (5, ("mcpsync.transport.stdio", "mcpsync.transport.http", "mcpsync.transport.sse",
         "mcpsync.transport.memory")),
    (6, ("mcpsync.client",)),
    (7, ("mcpsync.manager", "mcpsync.server", "mcpsync.cli", "mcpsync.demo",
         "mcpsync.__main__", "mcpsync.gateway")),
]

#: mcpsync modules allowed to import mcpauth (always inside a function).
MCPAUTH_USERS = ("mcpsync._mcpauth_import", "mcpsync._config_oauth", "mcpsync.cli")

#: Known breaks of the order, each with the reason it is still there. Keep this empty.
EXCEPTIONS: set[tuple[str, str]] = set()

TRANSPORTS = ("mcpsync.transport.stdio", "mcpsync.transport.http", "mcpsync.transport.memory")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import that can run."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    yield from walk(sub, in_function)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, in_function
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    module = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    module = child.module or ""
                yield module, child.lineno, in_function
                for alias in child.names:   # ``from pkg import submodule``
                    yield f"{module}.{alias.name}", child.lineno, in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            yield from walk(child, inner)

    yield from walk(ast.parse(path.read_text(encoding="utf-8")), False)


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None   # (prefix length, layer): the longest prefix wins
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def _known(module: str) -> bool:
    return module == "mcpsync" or _layer(module) is not None


def test_every_mcpsync_module_has_a_layer() -> None:
    unplaced = [_module_name(p) for p in _modules("mcpsync") if not _known(_module_name(p))]
    assert not unplaced, f"give these modules a layer in tests/layout/test_layers.py: {unplaced}"


def test_a_lower_layer_never_imports_a_higher_one() -> None:
    broken = []
    for path in _modules("mcpsync"):
        importer = _module_name(path)
        if importer == "mcpsync":
            continue   # the package face loads everything lazily, by name
        mine = _layer(importer)
        assert mine is not None
        for imported, line, _ in _imports(path):
            theirs = _layer(imported)
            if theirs is not None and theirs > mine and (importer, imported) not in EXCEPTIONS:
                broken.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {imported}"
                              f" ({theirs})")
    assert not broken, "\n".join(broken)


def test_no_transport_reaches_into_another_transports_private_modules() -> None:
    broken = []
    for path in _modules("mcpsync/transport"):
        importer = _module_name(path)
        for imported, line, _ in _imports(path):
            for mine in TRANSPORTS:
                for other in TRANSPORTS:
                    if (other != mine and importer.startswith(mine)
                            and imported.startswith(other)):
                        broken.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not broken, "\n".join(broken)


def test_mcpauth_never_imports_mcpsync() -> None:
    broken = [f"{path.relative_to(ROOT)}:{line} imports {imported}"
              for path in _modules("mcpauth")
              for imported, line, _ in _imports(path)
              if imported == "mcpsync" or imported.startswith("mcpsync.")]
    assert not broken, "\n".join(broken)


def test_mcpsync_imports_mcpauth_only_lazily_and_only_where_oauth_is_wired() -> None:
    broken = []
    for path in _modules("mcpsync"):
        importer = _module_name(path)
        allowed = any(importer == m or importer.startswith(m + ".") for m in MCPAUTH_USERS)
        for imported, line, in_function in _imports(path):
            is_mcpauth = imported == "mcpauth" or imported.startswith("mcpauth.")
            if is_mcpauth and not (allowed and in_function):
                broken.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not broken, "\n".join(broken)


def test_the_walk_sees_imports_inside_functions() -> None:
    """The checks above mean something only if lazy imports are seen."""
    found = {imported for imported, _, lazy in _imports(ROOT / "mcpsync/cli/_login.py") if lazy}
    assert "mcpsync._config_oauth" in found
