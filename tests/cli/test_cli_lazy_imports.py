"""A Ctrl-C that stops one ``mcpsync.cli.main()``'s first import of a lazily loaded module
does not break another ``main()`` running at the same time in another thread.

The command line imports most modules inside its functions (``mcpsync --help`` stays light).
A bare ``from module import name`` in a thread that waited on the module lock while a Ctrl-C
stopped another thread's import of that module reads the name from the failed, half-built
module: ``ImportError: cannot import name``. The ``mcpsync`` command itself runs one
``main()`` on its main thread, where the next import simply loads the module again; a program
that calls ``main()`` from two threads is hit. Every such import in the command line now has
``importlib.import_module`` before it, as the rest of the package does. Each case runs in a
fresh interpreter (the module must not be loaded yet).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = r'''
import sys, threading, time
from mcpsync.cli import main
MODULE, CONFIG = sys.argv[1], sys.argv[2]
ARGV = ["--config", CONFIG, "tools", "a"]
assert MODULE not in sys.modules
entered = threading.Event()
got = []

def other():
    entered.wait(10)
    got.append(main(ARGV))

def trace(frame, event, arg):
    if event == "call" and frame.f_globals.get("__name__") == MODULE:
        sys.settrace(None)
        entered.set()
        time.sleep(0.3)   # the other thread waits on the module lock
        raise KeyboardInterrupt

t = threading.Thread(target=other, name="mcpsync-test-other", daemon=True)
t.start()
sys.settrace(trace)
try:
    first = main(ARGV)
finally:
    sys.settrace(None)
t.join(30)
print(first, got, main(ARGV))
'''


@pytest.mark.timeout(120)
@pytest.mark.parametrize("module", ["mcpsync.config_files", "mcpsync.manager"])
def test_a_ctrl_c_in_one_mains_first_import_leaves_another_threads_main_working(
        module: str, tmp_path: Path) -> None:
    config = tmp_path / "servers.json"
    # A server that exits at once: the command fails to connect (exit 3), after loading
    # the config and the Manager.
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "true"}}}))
    done = subprocess.run([sys.executable, "-c", PROBE, module, str(config)],
                          capture_output=True, text=True, check=False, timeout=100)
    assert done.returncode == 0, (done.stdout, done.stderr)
    # interrupted (130); the other thread's command and the next one both fail to connect
    assert done.stdout.split("\n")[0] == "130 [3] 3", (done.stdout, done.stderr)
    assert "cannot import name" not in done.stderr, done.stderr


def _lazy_imports_without_loader() -> list[str]:
    """Every function-level ``from <mcpsync or mcpauth module> import ...`` in the command
    line (``mcpsync/cli`` and the ``mcpsync/__main__.py`` that the console script runs)
    whose statement before it is not ``importlib.import_module(<that module>)``, except for
    modules that importing the file's own package or module has loaded already (never
    half-built by then)."""
    package = Path(__file__).resolve().parents[2] / "mcpsync"
    cli = package / "cli"
    missing: list[str] = []
    for owner, paths in (("mcpsync.cli", sorted(cli.glob("*.py"))),
                         ("mcpsync.__main__", [package / "__main__.py"])):
        missing += _missing_loaders(cli, owner, paths)
    return missing


def _missing_loaders(cli: Path, owner: str, paths: list[Path]) -> list[str]:
    """:func:`_lazy_imports_without_loader` for the files ``paths``, which ``import owner``
    loads."""
    import ast

    probe = subprocess.run([sys.executable, "-c", f"import sys, {owner}\n"
                            "print(' '.join(sorted(sys.modules)))"],
                           capture_output=True, text=True, check=True, timeout=60)
    loaded = set(probe.stdout.split())
    missing: list[str] = []
    for path in paths:
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                for field in ("body", "orelse", "finalbody"):
                    body = getattr(node, field, None)
                    if not isinstance(body, list):
                        continue
                    for i, stmt in enumerate(body):
                        if not isinstance(stmt, ast.ImportFrom) or stmt.module is None \
                                or stmt.module.split(".")[0] not in ("mcpsync", "mcpauth"):
                            continue
                        module = stmt.module
                        sub = cli.parent / stmt.names[0].name
                        if module == "mcpsync" and len(stmt.names) == 1 and (
                                sub.with_suffix(".py").exists() or sub.is_dir()):
                            module = f"mcpsync.{stmt.names[0].name}"   # a submodule
                        if module in loaded:
                            continue
                        before = body[i - 1] if i else None
                        ok = (isinstance(before, ast.Expr) and isinstance(before.value, ast.Call)
                              and ast.unparse(before.value)
                              == f"importlib.import_module('{module}')")
                        if not ok:
                            missing.append(f"{path.name}:{stmt.lineno}: {module}")
    return missing


def test_every_lazy_import_of_the_command_line_has_its_loader() -> None:
    assert _lazy_imports_without_loader() == []
