"""close() on one thread while another starts the legacy GET stream's thread.

A gateway closes an upstream connection on the thread that handles a host's DELETE, while the
connection's own thread may be starting the GET stream (after ``notifications/initialized``
or when it resumes a session another replica opened). ``close()`` once joined the GET thread
in the instant after it was created and before it was started: ``RuntimeError: cannot join
thread before it is started``, which the gateway answered with HTTP 500 and which left the
connection's threads running. And a close that came as the GET thread began its request
found nothing to abort, so the thread went on reading a stream nobody would end.

Each test holds the GET thread at the point in question until the close has reached it,
against the real loopback fault server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from http_peers.fault_server import FaultServer

from mcpsync.transport.http import _legacy
from mcpsync.transport.http._conn import Abortable
from mcpsync.transport.http._transport import HttpTransport, SessionState

pytestmark = pytest.mark.timeout(30)

STATE = SessionState("legacy", "2025-06-18", {"protocolVersion": "2025-06-18",
                                              "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "1"}})


def _on_thread(work: Callable[[], None], errors: list[BaseException],
               name: str) -> threading.Thread:
    def run() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _slow_threads(monkeypatch: pytest.MonkeyPatch,
                  start: Callable[[Any], None]) -> list[threading.Thread]:
    """Make the GET thread with ``start`` as its start() (``real_start()`` starts it);
    returns the threads made."""
    made: list[threading.Thread] = []

    class Slow(threading.Thread):
        def start(self) -> None:
            start(self)

        def real_start(self) -> None:
            super().start()

    def new_thread(name: str, target: Any, *args: Any) -> threading.Thread:
        thread = Slow(target=target, args=args, name=name, daemon=True)
        made.append(thread)
        return thread

    monkeypatch.setattr(_legacy, "new_thread", new_thread)
    return made


def _joining(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set as close() reaches the GET thread's join."""
    reached = threading.Event()
    real_join = _legacy.LegacySession.join

    def join(self: _legacy.LegacySession, timeout: float) -> None:
        reached.set()
        real_join(self, timeout)

    monkeypatch.setattr(_legacy.LegacySession, "join", join)
    return reached


def test_close_while_the_get_thread_starts_waits_for_it_and_joins_it(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    fault_server.faults.era = "legacy"
    reached = _joining(monkeypatch)

    def start(thread: Any) -> None:   # until close() is at the join (with the fix, held there)
        reached.wait(5)
        thread.real_start()

    made = _slow_threads(monkeypatch, start)
    transport = HttpTransport(fault_server.url, name="race")
    errors: list[BaseException] = []
    resumer = _on_thread(lambda: transport.resume_session("sid-1", STATE), errors, "t-resume")
    closer = _on_thread(transport.close, errors, "t-close")
    closer.join(10)
    resumer.join(10)
    assert not errors, errors   # before: RuntimeError, cannot join thread before it is started
    assert made and not made[0].is_alive()   # started, then joined by close()


def test_a_start_cut_short_by_ctrl_c_is_still_joined(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A Ctrl-C inside Thread.start() (it waits for the new thread to begin) leaves a thread
    that begins later; close() waits for it and joins it."""
    fault_server.faults.era = "legacy"

    def start(thread: Any) -> None:
        threading.Timer(0.05, thread.real_start).start()
        raise KeyboardInterrupt

    made = _slow_threads(monkeypatch, start)
    transport = HttpTransport(fault_server.url, name="cut")
    with pytest.raises(KeyboardInterrupt):
        transport.resume_session("sid-1", STATE)
    transport.close()
    assert made and made[0].ident is not None and not made[0].is_alive()


def test_a_close_as_the_get_request_begins_ends_the_get_thread(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """The close lands after the GET loop checked for it and before its request could be
    aborted: the loop sees the close and ends instead of opening the stream."""
    fault_server.faults.era = "legacy"
    fault_server.faults.stateful = False   # any session id: the GET stream would open
    in_window, stopped = threading.Event(), threading.Event()

    def held() -> Abortable:
        if threading.current_thread().name.startswith("mcpsync-http-get"):
            in_window.set()
            stopped.wait(5)
        return Abortable()

    real_stop = _legacy.LegacySession.stop

    def stop(self: _legacy.LegacySession) -> None:
        real_stop(self)
        stopped.set()

    monkeypatch.setattr(_legacy, "Abortable", held)
    monkeypatch.setattr(_legacy.LegacySession, "stop", stop)
    transport = HttpTransport(fault_server.url, name="late")
    transport.resume_session("sid-1", STATE)
    assert in_window.wait(5)
    get = transport._legacy.get_thread
    assert get is not None
    transport.close()
    assert not get.is_alive()   # before: still reading the stream after close() returned
    assert not [r for r in fault_server.requests if r.method == "GET"]


def test_a_close_before_the_get_connection_exists_ends_the_get_thread(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """The close lands while the GET's connection is being made (announced to the request's
    Abortable, no socket yet): its abort shuts nothing, so the loop must notice the close
    when the answer arrives, close it and end, instead of reading the stream."""
    import urllib3.connection

    fault_server.faults.era = "legacy"
    fault_server.faults.stateful = False   # any session id: the GET stream opens
    in_connect, stopped = threading.Event(), threading.Event()
    real_connect = urllib3.connection.HTTPConnection.connect

    def connect(self: Any) -> None:
        if threading.current_thread().name.startswith("mcpsync-http-get"):
            in_connect.set()
            stopped.wait(5)
        real_connect(self)

    real_stop = _legacy.LegacySession.stop

    def stop(self: _legacy.LegacySession) -> None:
        real_stop(self)
        stopped.set()

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "connect", connect)
    monkeypatch.setattr(_legacy.LegacySession, "stop", stop)
    transport = HttpTransport(fault_server.url, name="early")
    transport.resume_session("sid-1", STATE)
    assert in_connect.wait(5)
    get = transport._legacy.get_thread
    assert get is not None
    transport.close()
    assert not get.is_alive()   # before: still reading the stream after close() gave up
