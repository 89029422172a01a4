"""The guard against PyPI's unrelated ``mcpauth`` distribution, with its real 0.1.1 wheel.

A temporary target directory gets a wheel built from this checkout, then the foreign
``mcpauth-0.1.1`` wheel installed over it with ``pip --target --upgrade``, which replaces
our ``mcpauth/`` exactly as ``pip install mcpauth`` does in a venv. A child interpreter
started with ``-S`` (no site-packages, so the project's venv is invisible) and only that
directory on ``sys.path`` must then refuse the import with the repair command. A second
directory without the foreign wheel is the control: there the import works.

The project's own venv is never touched. Downloading the wheel needs the package registry:
in CI (``CI=true``) a failed download fails the test; elsewhere it skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT

FOREIGN = "mcpauth==0.1.1"

_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
from mcpsync._mcpauth_import import import_mcpauth
try:
    module = import_mcpauth()
except ImportError as exc:
    print("REFUSED", exc)
    print("LOADED", sorted(m for m in sys.modules if m.startswith("mcpauth")))
else:
    print("IMPORTED", module.__file__, "OAuthProvider" in module.__all__)
"""


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(ours only, ours with the foreign wheel installed over it)."""
    work = tmp_path_factory.mktemp("mcpauth-guard")
    downloaded = _pip("download", "--no-deps", "--only-binary", ":all:", FOREIGN,
                      "-d", str(work / "wheels"), cwd=work)
    wheels = list((work / "wheels").glob("mcpauth-0.1.1-*.whl"))
    if downloaded.returncode != 0 or not wheels:
        message = f"cannot download {FOREIGN}: {downloaded.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # Build from a copy so the checkout gets no build/ directory.
    source = work / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("mcpsync", "mcpauth"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    clean, mixed = work / "clean", work / "mixed"
    for target in (clean, mixed):
        built = _pip("install", "-q", "--no-deps", "--target", str(target), str(source),
                     cwd=work)
        assert built.returncode == 0, built.stderr[-2000:]
    replaced = _pip("install", "-q", "--no-deps", "--upgrade", "--target", str(mixed),
                    str(wheels[0]), cwd=work)
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    assert (mixed / "mcpauth-0.1.1.dist-info").is_dir()
    yield clean, mixed
    shutil.rmtree(work, ignore_errors=True)


def _probe(target: Path) -> str:
    done = subprocess.run([sys.executable, "-S", "-c", _PROBE, str(target)],
                          capture_output=True, text=True, timeout=60, check=False,
                          cwd=target)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_foreign_mcpauth_is_refused_with_the_repair(targets: tuple[Path, Path]) -> None:
    _clean, mixed = targets
    out = _probe(mixed)
    assert out.startswith("REFUSED"), out
    assert "mcpauth 0.1.1" in out
    assert "pip uninstall -y mcpauth && pip install --force-reinstall --no-deps mcpsync" in out
    # The foreign code never ran: nothing named mcpauth was imported.
    assert "LOADED []" in out


def test_our_own_mcpauth_imports(targets: tuple[Path, Path]) -> None:
    clean, _mixed = targets
    out = _probe(clean)
    assert out.startswith("IMPORTED"), out
    assert str(clean / "mcpauth" / "__init__.py") in out
    assert out.strip().endswith("True")


def test_in_this_venv_the_guard_passes() -> None:
    from mcpsync._mcpauth_import import import_mcpauth

    module = import_mcpauth("mcpauth.provider")
    assert module.__name__ == "mcpauth.provider"
    assert hasattr(module, "OAuthProvider")
