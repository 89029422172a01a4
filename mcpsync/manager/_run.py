"""Run one function over many items on a few named daemon threads (starts, stops, close).

``concurrent.futures.ThreadPoolExecutor`` threads are not daemons and cannot be abandoned
after a deadline, which ``Manager.close()`` must do with a server that will not die; this
helper gives each run its own ``mcpsync-<what>-<n>`` threads and an overall deadline.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["run_parallel"]

T = TypeVar("T")
R = TypeVar("R")


def run_parallel(fn: Callable[[T], R], items: Sequence[T], *, what: str, limit: int,
                 timeout: float | None = None) -> tuple[list[R | BaseException | None],
                                                        list[int]]:
    """Call ``fn(item)`` for each item, at most ``limit`` at once.

    Returns ``(results, unfinished)``: ``results[i]`` is what ``fn(items[i])`` returned or
    raised (``None`` while unfinished), and ``unfinished`` the indexes still running when
    ``timeout`` (seconds, for the whole run) passed. Those threads are daemons and are left
    to end on their own; every other thread is joined.
    """
    results: list[R | BaseException | None] = [None] * len(items)
    done = [False] * len(items)
    if not items:
        return results, []
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(items)):
        todo.put(index)
    lock = threading.Lock()

    def work() -> None:
        while True:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            try:
                outcome: R | BaseException = fn(items[index])
            except BaseException as exc:  # reported to the caller, never lost
                outcome = exc
            with lock:
                results[index] = outcome
                done[index] = True

    threads = [threading.Thread(target=work, name=f"mcpsync-{what}-{n}", daemon=True)
               for n in range(min(max(1, limit), len(items)))]
    for thread in threads:
        thread.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with lock:
        unfinished = [i for i, finished in enumerate(done) if not finished]
        return list(results), unfinished
