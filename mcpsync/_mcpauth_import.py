"""The one way mcpsync imports mcpauth: refuse an unrelated distribution of the same name.

PyPI holds another project called ``mcpauth`` (an auth middleware for MCP servers, 0.1.x)
with the same import name as the OAuth package shipped inside the mcpsync distribution.
``pip install mcpauth`` overwrites our files in ``site-packages/mcpauth/`` without a word,
and ``pip check`` cannot see it (pip has no way to declare such a conflict). Imported
blindly, the foreign package fails later with an ``AttributeError`` on ``OAuthProvider``, or
worse, runs code the user never meant to run where credentials are handled.

So, before the first import, ask :func:`importlib.metadata.packages_distributions` which
distributions own the top-level name ``mcpauth``; any that is not mcpsync's own is a
conflict, reported as an :class:`ImportError` that names it and says how to repair. The
foreign package's code is never executed. The answer is computed once per process.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

__all__ = ["import_mcpauth"]

_REPAIR = "pip uninstall -y mcpauth && pip install --force-reinstall --no-deps mcpsync"

_lock = threading.Lock()
_checked: str | None = None   # "" once checked and clean, else the ImportError text


def _conflict() -> str:
    """The error text for a foreign ``mcpauth`` distribution, or ``""`` when there is none."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    ours = set(owners.get("mcpsync", ()))
    foreign = sorted({dist for dist in owners.get("mcpauth", ()) if dist not in ours})
    if not foreign:
        return ""
    from importlib.metadata import PackageNotFoundError, version

    named = []
    for dist in foreign:
        try:
            named.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            named.append(dist)
    owner = ", ".join(sorted(ours)) or "mcpsync"
    return (f"the 'mcpauth' package is also installed by the unrelated distribution "
            f"{', '.join(named)}, which replaces the mcpauth that ships with {owner}; "
            f"repair the environment with: {_REPAIR}")


def import_mcpauth(name: str = "mcpauth") -> ModuleType:
    """Import ``name`` (``mcpauth`` or one of its modules) after the conflict check.

    Raises :class:`ImportError` naming the foreign distribution and the repair command when
    another distribution owns ``mcpauth``; the check runs once per process.
    """
    global _checked
    if _checked is None:
        with _lock:
            if _checked is None:
                _checked = _conflict()
    if _checked:
        raise ImportError(_checked, name="mcpauth")
    package = importlib.import_module("mcpauth")   # a shadowed package fails here too
    return package if name == "mcpauth" else importlib.import_module(name)
