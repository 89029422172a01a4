"""``progress=True``: a progress bar for one call, closed when the call ends.

With tqdm installed (the ``progress`` extra) the bar is ``tqdm.auto``'s, so a notebook with
ipywidgets gets the widget and anything else the text bar. Without tqdm a plain line on
``sys.stderr`` is rewritten in place. The label and the server's messages are escaped first
(:mod:`mcpsync._printable`), so a message cannot move the cursor or retitle the terminal.
Both write through ``sys.stderr`` (never file
descriptor 2), which is what a notebook captures and shows under the cell.

The bar's updates run on the session's dispatcher thread, in arrival order; ``close()`` runs
in the caller's thread once the call has ended, failed or not, after every update (a call
with a progress callback is settled behind its progress).
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from typing import Any

from mcpsync._printable import printable

__all__ = ["ProgressBar", "check_progress", "progress_bar"]

_TEXT_EVERY = 0.2   # seconds between two rewrites of the plain text line


def _tqdm_class() -> Any:
    """``tqdm.auto.tqdm``, or ``None`` without tqdm. tqdm warns once when a notebook lacks
    ipywidgets; the text bar it falls back to works, so that warning is kept quiet."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class ProgressBar:
    """The progress callback of one call: ``update(progress, total, message)`` then
    ``close()``; safe to close twice."""

    def __init__(self, label: str) -> None:
        self._label = label = printable(label)
        self._lock = threading.Lock()
        self._closed = False
        self._last: tuple[float, float | None, str | None] = (0.0, None, None)
        self._written = 0.0              # when the text line was last written
        self._line = 0                   # length of the text line on screen
        tqdm = _tqdm_class()
        self._bar = None if tqdm is None else tqdm(total=None, desc=label, file=sys.stderr,
                                                   leave=True, dynamic_ncols=True)

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        with self._lock:
            if self._closed:
                return
            self._last = (progress, total, message)
            if self._bar is not None:
                self._tqdm_update(progress, total, message)
            else:
                now = time.monotonic()
                if now - self._written >= _TEXT_EVERY:
                    self._written = now
                    self._text()

    def _tqdm_update(self, progress: float, total: float | None, message: str | None) -> None:
        bar = self._bar
        assert bar is not None
        if total is not None and total != bar.total:
            bar.total = total
        bar.n = progress
        if message:
            bar.set_postfix_str(printable(message, 80), refresh=False)
        bar.refresh()

    def _text(self) -> None:
        progress, total, message = self._last
        line = f"{self._label}: {progress:g}" + (f"/{total:g}" if total is not None else "")
        if total:
            line += f" ({100 * progress / total:.0f}%)"
        if message:
            line += f" {printable(message, 80)}"
        pad = " " * max(0, self._line - len(line))
        self._line = len(line)
        try:
            sys.stderr.write(f"\r{line}{pad}")
            sys.stderr.flush()
        except (OSError, ValueError):   # a closed or odd stderr never fails the call
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.close()
            elif self._written or self._last[0]:
                self._text()
                try:
                    sys.stderr.write("\n")
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass


def progress_bar(progress: object, what: str, label: str) -> ProgressBar | None:
    """The bar for ``progress=True`` (titled ``label``), ``None`` for ``False``; anything
    that is neither a bool nor callable is a ``TypeError`` naming it (``what`` says which
    call)."""
    if progress is True:
        return ProgressBar(label)
    if progress is False:
        return None
    raise _not_progress(progress, what)


def check_progress(progress: object, what: str) -> None:
    """Raise the ``TypeError`` of :func:`progress_bar` now, before anything is sent."""
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise _not_progress(progress, what)


def _not_progress(progress: object, what: str) -> TypeError:
    return TypeError(f"{what}: progress must be a callable progress(progress, total, message) "
                    f"or True for a progress bar, not {type(progress).__name__} "
                    f"({progress!r:.60})")
