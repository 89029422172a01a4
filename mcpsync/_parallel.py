"""``run_parallel``: one function over many items on a few threads, with one deadline.

Only the Manager uses it (starting and stopping many servers at once), so it is not in
``_threads``, which every client loads; ``_threads`` still exports it. Its threads start
through :func:`mcpsync._threads.spawn`, as every thread of the library does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from mcpsync._threads import PREFIX, join_all, spawn

__all__ = ["run_parallel"]

T = TypeVar("T")
R = TypeVar("R")


def run_parallel(fn: Callable[[T], R], items: Sequence[T], *, what: str, limit: int,
                 timeout: float | None = None) -> tuple[list[R | BaseException | None],
                                                        list[int]]:
    """Call ``fn(item)`` for each item on at most ``limit`` threads ``mcpsync-<what>-<n>``.

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

    threads = [spawn(f"{PREFIX}{what}-{n}", work) for n in range(min(max(1, limit), len(items)))]
    join_all(threads, None if timeout is None else time.monotonic() + timeout)
    with lock:
        unfinished = [i for i, finished in enumerate(done) if not finished]
        return list(results), unfinished
