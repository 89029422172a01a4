"""One rule for turning a server's display name into part of a thread or logger name.

Display names come from users and servers (``my.server``, ``Café API``, ``a/b``). Logger
names are dotted paths, so ``my.server`` must not create a ``my`` child logger, and thread
names show up in ``ps``, debuggers and log lines, where spaces, slashes and look-alike
letters confuse. Every place that builds such a name uses :func:`safe`, so a server's
threads and its logger always carry the same spelling.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["safe"]

# ASCII only: a str pattern's ranges match ASCII letters and digits, so "é" is replaced too.
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def safe(name: str) -> str:
    """``name`` with every character outside ASCII ``[A-Za-z0-9_-]`` replaced by ``_``.

    An empty name becomes ``"_"``, so the part is never empty (``mcpsync-stdio-_`` rather
    than a name ending in a dash).
    """
    return _UNSAFE.sub("_", name) or "_"
