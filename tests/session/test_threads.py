"""The thread toolkit: names, daemons, lazy pools, joins against one deadline."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from mcpsync._threads import LazyPool, join_all, new_thread, run_parallel, spawn


def test_spawn_starts_a_named_daemon_with_arguments() -> None:
    seen: list[tuple[str, int]] = []
    started = spawn("mcpsync-test-spawn", lambda a, b: seen.append((a, b)), "x", 2)
    started.join(5)
    assert started.name == "mcpsync-test-spawn"
    assert started.daemon
    assert seen == [("x", 2)]


@pytest.mark.parametrize("name", ["worker", "mcpsync-", "MCPSYNC-x", "Thread-1"])
def test_a_name_without_the_prefix_is_refused(name: str) -> None:
    before = threading.active_count()
    with pytest.raises(ValueError, match="must start with 'mcpsync-'"):
        spawn(name, print)
    with pytest.raises(ValueError, match="must start with 'mcpsync-'"):
        LazyPool(name, 2)
    assert threading.active_count() == before


def test_new_thread_is_not_started() -> None:
    unstarted = new_thread("mcpsync-test-later", print)
    assert unstarted.daemon and unstarted.ident is None
    assert join_all([unstarted, None], time.monotonic() + 1) == []


def test_join_all_shares_one_deadline_and_reports_the_stuck() -> None:
    release = threading.Event()
    stuck = [spawn(f"mcpsync-test-stuck-{k}", release.wait) for k in range(3)]
    quick = spawn("mcpsync-test-quick", lambda: None)
    try:
        began = time.monotonic()
        alive = join_all([quick, *stuck], time.monotonic() + 0.3)
        waited = time.monotonic() - began
        assert alive == stuck
        assert 0.25 < waited < 1.0  # one budget for all three, not 0.3 s each
    finally:
        release.set()
        assert join_all(stuck, time.monotonic() + 5) == []


def test_join_all_skips_the_calling_thread() -> None:
    out: list[list[threading.Thread]] = []
    me = spawn("mcpsync-test-self", lambda: out.append(join_all([threading.current_thread()],
                                                                None)))
    me.join(5)
    assert out == [[]]


def test_lazy_pool_starts_threads_only_when_none_is_idle() -> None:
    pool = LazyPool("mcpsync-test-pool", 3)
    assert pool.threads == []
    done = threading.Event()
    assert pool.submit(done.set)
    assert done.wait(5)
    time.sleep(0.05)  # the thread goes idle
    again = threading.Event()
    pool.submit(again.set)
    assert again.wait(5)
    assert [t.name for t in pool.threads] == ["mcpsync-test-pool-1"]

    gate = threading.Event()
    running = threading.Semaphore(0)

    def block() -> None:
        running.release()
        gate.wait(5)

    for _ in range(5):
        pool.submit(block)
    for _ in range(3):
        assert running.acquire(timeout=5)
    assert [t.name for t in pool.threads] == [f"mcpsync-test-pool-{k}" for k in (1, 2, 3)]
    assert all(t.daemon for t in pool.threads)
    gate.set()
    for _ in range(2):  # the two queued jobs run once threads free up
        assert running.acquire(timeout=5)
    assert pool.stop(5) == []
    assert not pool.submit(print)
    assert not any(t.is_alive() for t in pool.threads)


def test_lazy_pool_reports_a_raising_job_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[Exception] = []
    pool = LazyPool("mcpsync-test-errors", 1, on_error=errors.append)
    ok = threading.Event()
    pool.submit(lambda: 1 / 0)
    pool.submit(ok.set)
    assert ok.wait(5)
    assert pool.stop(5) == []
    assert [type(e) for e in errors] == [ZeroDivisionError]

    default = LazyPool("mcpsync-test-default", 1)
    with caplog.at_level(logging.WARNING, logger="mcpsync.threads"):
        default.submit(lambda: [][0])
        assert default.stop(5) == []
    assert "a background job raised" in caplog.text and "IndexError" in caplog.text


def test_lazy_pool_stop_gives_up_on_a_stuck_job_within_its_budget() -> None:
    pool = LazyPool("mcpsync-test-stuck-pool", 2)
    release = threading.Event()
    pool.submit(release.wait)
    pool.submit(release.wait)
    time.sleep(0.05)
    began = time.monotonic()
    alive = pool.stop(0.2)
    assert time.monotonic() - began < 1.0
    assert sorted(t.name for t in alive) == ["mcpsync-test-stuck-pool-1",
                                             "mcpsync-test-stuck-pool-2"]
    release.set()
    assert join_all(alive, time.monotonic() + 5) == []


def test_run_parallel_collects_results_and_errors_in_order() -> None:
    names: set[str] = set()

    def work(n: int) -> int:
        names.add(threading.current_thread().name)
        if n == 2:
            raise KeyError(n)
        return n * 10

    results, unfinished = run_parallel(work, [1, 2, 3, 4], what="test-run", limit=2)
    assert unfinished == []
    assert results[0] == 10 and results[2] == 30 and results[3] == 40
    assert isinstance(results[1], KeyError)
    assert names <= {"mcpsync-test-run-0", "mcpsync-test-run-1"}


def test_run_parallel_leaves_the_unfinished_after_its_timeout() -> None:
    release = threading.Event()
    try:
        results, unfinished = run_parallel(
            lambda n: release.wait(5) if n else n, [0, 1], what="test-slow", limit=2,
            timeout=0.2)
        assert unfinished == [1]
        assert results[0] == 0 and results[1] is None
    finally:
        release.set()
    for t in threading.enumerate():
        if t.name.startswith("mcpsync-test-slow"):
            t.join(5)


def test_lazy_pool_never_used_stops_at_once_and_refuses_jobs() -> None:
    """A pool that never ran a job (most sessions' callback pools) has no thread to end:
    stop() returns at once, with nothing alive, and refuses jobs from then on."""
    pool = LazyPool("mcpsync-unused", 2)
    assert pool.stop(timeout=5.0) == []
    assert pool.threads == []
    assert not pool.submit(lambda: None)
    assert pool.threads == []
