"""``python -m mcpsync`` and the ``mcpsync`` console script (``mcpsync.__main__:main``).

Kept to an import and a call: the command itself lives in :mod:`mcpsync.cli`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mcpsync`` command; the console script passes the return value to
    ``sys.exit``."""
    # import_module first, as the command line's other lazy loaders do: a thread that
    # waited on the module lock while a Ctrl-C stopped another thread's first import would
    # otherwise read ``main`` from the failed, half-built module (ImportError).
    importlib.import_module("mcpsync.cli")
    from mcpsync.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
