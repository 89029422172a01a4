"""``stderr="show"``: a server's stderr lines printed as they arrive, for debugging a server
that will not start (docs/client.md, "Seeing a server's stderr").

The lines go through ``sys.stderr`` as it is when each line arrives, never to file
descriptor 2: in a notebook ``sys.stderr`` is the kernel's stream, shown under the cell,
while fd 2 is the kernel's terminal, which nobody sees (and a child writing there directly
interleaves bytes with the kernel's own output). Each line is prefixed with the server's
name, so two servers' lines can be told apart.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["stderr_printer"]


def stderr_printer(name: str, then: Callable[[str], None] | None) -> Callable[[str], None]:
    """An ``on_stderr`` callback printing ``[name] line`` on ``sys.stderr``, then calling
    ``then`` (the user's own ``on_stderr``) if there is one."""
    prefix = f"[{name}] "

    def show(line: str) -> None:
        stream = sys.stderr
        if stream is not None:   # pythonw and some services have none
            try:
                stream.write(prefix + line + "\n")
                stream.flush()
            except (OSError, ValueError):   # a closed stream: the line stays in the ring
                pass
        if then is not None:
            then(line)

    return show
