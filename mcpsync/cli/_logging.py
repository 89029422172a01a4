"""Where the ``mcpsync`` command's log records go: stderr, at DEBUG with ``--verbose``,
else only the few warnings a person must see.

A handler is installed for one command and removed after it, so ``cli.main()`` called
in-process (tests, embedding) leaves the loggers as it found them.
"""

from __future__ import annotations

import logging
import sys

_LOGGERS = ("mcpsync", "mcpauth")


# Loggers whose warnings reach stderr without --verbose: the config loader (unknown keys) and
# the CLI itself (a stored login that cannot be used).
_QUIET_LOGGERS = ("mcpsync.config", "mcpsync.cli", "mcpsync.gateway")


def _logging_handler(verbose: bool) -> logging.Handler:
    """Log output on stderr: ``--verbose`` puts the ``mcpsync`` (and ``mcpauth``) loggers at
    DEBUG; otherwise only the warnings of the config loader (an unknown key in a file) and of
    the CLI show, as
    ``mcpsync: warning: ...``, since nothing else in a one-shot command needs a person."""
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
    else:
        handler.setFormatter(logging.Formatter("mcpsync: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).addHandler(handler)
    return handler


def _drop_handler(handler: logging.Handler) -> None:
    for name in (*_LOGGERS, *_QUIET_LOGGERS):
        logger = logging.getLogger(name)
        if handler in logger.handlers:
            logger.removeHandler(handler)
            if name in _LOGGERS:
                logger.setLevel(logging.NOTSET)
