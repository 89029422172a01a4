"""close() on one thread while another starts the legacy GET stream's thread.

A gateway closes an upstream connection on the thread that handles a host's DELETE, while the
connection's own thread may be starting the GET stream (after ``notifications/initialized``
or when it resumes a session another replica opened). ``close()`` once joined the GET thread
in the instant after it was created and before it was started: ``RuntimeError: cannot join
thread before it is started``, which the gateway answered with HTTP 500 and which left the
connection's threads running. The start is slowed down here so that the close lands in it
every time, against the real loopback fault server.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from http_peers.fault_server import FaultServer

from mcpsync.transport.http import _legacy
from mcpsync.transport.http._transport import HttpTransport, SessionState

pytestmark = pytest.mark.timeout(30)


def test_close_while_the_get_thread_starts_waits_for_it_and_joins_it(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    fault_server.faults.era = "legacy"
    starting = threading.Event()
    made: list[threading.Thread] = []

    class SlowStart(threading.Thread):
        def start(self) -> None:
            starting.set()
            closed.wait(0.5)   # the close below runs meanwhile (or it is stuck: see below)
            super().start()

    def new_thread(name: str, target: Any, *args: Any) -> threading.Thread:
        thread = SlowStart(target=target, args=args, name=name, daemon=True)
        made.append(thread)
        return thread

    monkeypatch.setattr(_legacy, "new_thread", new_thread)
    closed = threading.Event()
    transport = HttpTransport(fault_server.url, name="race")
    state = SessionState("legacy", "2025-06-18", {"protocolVersion": "2025-06-18",
                                                  "capabilities": {},
                                                  "clientInfo": {"name": "t", "version": "1"}})
    errors: list[BaseException] = []

    def resume() -> None:
        try:
            transport.resume_session("sid-1", state)
        except BaseException as exc:
            errors.append(exc)

    resumer = threading.Thread(target=resume, name="test-resumer")
    resumer.start()
    assert starting.wait(5)
    closer_errors: list[BaseException] = []

    def close() -> None:
        try:
            transport.close()
        except BaseException as exc:
            closer_errors.append(exc)
        finally:
            closed.set()

    closer = threading.Thread(target=close, name="test-closer")
    closer.start()
    closer.join(10)
    resumer.join(10)
    assert not closer.is_alive() and not resumer.is_alive()
    assert not closer_errors, closer_errors   # before: cannot join thread before it is started
    assert not errors, errors
    assert made and all(not t.is_alive() for t in made)   # started, then joined by close()
