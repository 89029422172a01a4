"""``python -m mcpsync`` and the ``mcpsync`` console script (``mcpsync.__main__:main``).

Kept to an import and a call: the command itself lives in :mod:`mcpsync.cli`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mcpsync`` command; the console script passes the return value to
    ``sys.exit``."""
    from mcpsync.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
