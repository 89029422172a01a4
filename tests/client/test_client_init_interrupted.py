"""A ``connect()`` that fails once its server runs leaves no server, thread or descriptor.

Once the handshake is done, ``Client.__init__`` holds an open session (a running server, its
reader thread, its pipes) and still has steps to run: mark the handshake done, adopt its
outcome, take the server's own name, register the exit hook and the finalizer, and (a legacy
server with ``log_level=``) send ``logging/setLevel``. The caller gets no client when one of
them raises, so nobody else could close that session: the constructor must, before the
exception reaches the caller unchanged. The same holds for the session a probe restart
opens, and for a server whose session is being made when the failure comes.

Each failure is raised at the start of a step (a ``KeyboardInterrupt``, as a Ctrl-C is
raised as a function starts, and an ordinary exception), against the demo server.
"""

from __future__ import annotations

import gc
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import (
    PEERS,
    child_state,
    end_child,
    mcpsync_threads,
    open_fds,
    wait_no_threads,
    wait_until,
)

import mcpsync
from mcpsync.client import _client, _handshake, _lifecycle
from mcpsync.session import Session

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
EXIT_ON_PROBE = [sys.executable, str(PEERS / "scripted_server.py"), "exit-on-probe"]

#: Each step of the constructor after the handshake: (what to patch, the attribute).
STEPS: dict[str, tuple[Any, str]] = {
    "handshake_done": (Session, "handshake_done"),
    "adopt": (_client.Client, "_adopt"),
    "take_server_name": (_client.Client, "_take_server_name"),
    "watch": (_client, "watch"),
    "set_log_level": (_client.Client, "_request"),
}

#: The two kinds of failure: a Ctrl-C, and an ordinary exception (odd server data, a bug).
ERRORS: dict[str, Callable[[], BaseException]] = {
    "ctrl-c": KeyboardInterrupt,
    "error": lambda: RuntimeError("odd server data"),
}


class Before:
    """What runs before a connect: threads, descriptors, clients left to the exit hook."""

    def __init__(self) -> None:
        self.threads = set(mcpsync_threads())
        self.fds = open_fds()
        self.clients = set(_client._open_clients)

    def assert_nothing_left(self, pids: list[int]) -> None:
        """Every server in ``pids`` is gone (reaped), and nothing else is left."""
        assert pids, "no server was started"
        for pid in pids:
            assert wait_until(lambda pid=pid: child_state(pid) == "reaped", 5.0), \
                f"server {pid} is still {child_state(pid)}"
        assert wait_no_threads(self.threads, timeout=2.0) == []
        assert wait_until(lambda: open_fds() <= self.fds, 2.0), \
            f"fds left open: {open_fds() - self.fds}"
        assert set(_client._open_clients) <= self.clients, \
            "the failed client is left to the exit hook"


def _pid(transport: Any) -> int:
    pid = transport.pid
    assert isinstance(pid, int)
    return pid


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Session]]:
    """Every session a client opens; after the test, any left open is closed and its server
    ended, so that a failure here (the leak it finds) does not spill into later tests."""
    sessions: list[Session] = []
    original = _client.Client._open_session

    def recording(self: _client.Client) -> Session:
        session = original(self)
        sessions.append(session)
        return session

    monkeypatch.setattr(_client.Client, "_open_session", recording)
    yield sessions
    for session in sessions:
        session.close()
        end_child(_pid(session._transport))


@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("step", STEPS)
def test_a_failure_after_the_handshake_closes_the_session(
        step: str, error: str, opened: list[Session],
        monkeypatch: pytest.MonkeyPatch) -> None:
    owner, attribute = STEPS[step]
    original = getattr(owner, attribute)
    raised = ERRORS[error]()
    reached: list[str] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        if step == "set_log_level" and args[1] != "logging/setLevel":
            return original(*args, **kwargs)
        reached.append(step)
        raise raised

    monkeypatch.setattr(owner, attribute, failing)
    before = Before()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(type(raised)) as excinfo:
            # Legacy with log_level: the demo declares logging, so setLevel is sent.
            mcpsync.connect(DEMO, era="legacy", log_level="info")
        assert excinfo.value is raised     # the caller gets the very exception
        assert reached == [step]
        before.assert_nothing_left([_pid(session._transport) for session in opened])
        # The traceback holds the client (through the frames it passed): drop it and the
        # exception's own reference to it, so that the client is collected here and a
        # finalizer left attached would warn inside this block.
        raised.__traceback__ = None
        del excinfo
        gc.collect()
    # Nothing is left for the finalizer either: no "was not closed" warning, no reaper.
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("error", ERRORS)
def test_a_failure_after_a_probe_restart_closes_the_restarted_session(
        error: str, opened: list[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    # The server exits on server/discover; the one started again gets initialize, and the
    # legacy era is then remembered: a failure there must close the second server too.
    _handshake.forget_era()
    raised = ERRORS[error]()

    def failing(key: Any, era: str) -> None:
        raise raised

    monkeypatch.setattr(_handshake, "_remember", failing)
    before = Before()
    with pytest.raises(type(raised)) as excinfo:
        mcpsync.connect(EXIT_ON_PROBE, name="quitter")
    assert excinfo.value is raised
    assert len(opened) == 2      # the first server exited during the probe
    before.assert_nothing_left([_pid(session._transport) for session in opened])


@pytest.mark.parametrize("error", ERRORS)
@pytest.mark.parametrize("point", ["making the session", "watch_handshake"])
def test_a_failure_between_the_spawn_and_the_session_start_ends_the_server(
        point: str, error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server runs once the transport has started; the session made on it has no thread
    # until it is started (and, failing in its making, there is no session to close).
    raised = ERRORS[error]()
    transports: list[Any] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        first = args[0]
        transports.append(first if point == "making the session" else first._transport)
        raise raised

    if point == "making the session":
        monkeypatch.setattr(_lifecycle, "Session", failing)
    else:
        monkeypatch.setattr(Session, "watch_handshake", failing)
    before = Before()
    try:
        with pytest.raises(type(raised)) as excinfo:
            mcpsync.connect(DEMO)
        assert excinfo.value is raised
        assert len(transports) == 1
        before.assert_nothing_left([_pid(transports[0])])
    finally:
        for transport in transports:
            transport.close()
            end_child(_pid(transport))


@pytest.mark.parametrize("error", ERRORS)
def test_a_failure_as_the_finalizer_is_stored_leaves_it_quiet(
        error: str, opened: list[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    # watch() has made the finalizer but the failure comes before the constructor stores
    # it (a Ctrl-C raised as watch() sets the finalizer's ``atexit``, a property, so a
    # Python function start; on 3.10 also as watch() returns): the handler cannot detach it,
    # so when the failed client is collected it runs. It must not warn the caller about a
    # client they never had; closing the session again is harmless.
    from mcpsync.client import _finalizer

    raised = ERRORS[error]()
    made: list[Any] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        made.append(_finalizer.watch(*args, **kwargs))
        raise raised

    # The finalizer still closes what it was given (a close a second Ctrl-C cut short
    # would be finished there): count its calls.
    closes: list[int] = []
    close = _lifecycle.SessionResources.close

    def counting(self: _lifecycle.SessionResources) -> None:
        closes.append(1)
        close(self)

    monkeypatch.setattr(_client, "watch", failing)
    monkeypatch.setattr(_lifecycle.SessionResources, "close", counting)
    before = Before()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(type(raised)) as excinfo:
            mcpsync.connect(DEMO, era="legacy")
        assert excinfo.value is raised
        before.assert_nothing_left([_pid(session._transport) for session in opened])
        assert len(made) == 1 and made[0].alive     # the finalizer the handler never saw
        raised.__traceback__ = None
        del excinfo
        gc.collect()
        assert not made[0].alive, "the failed client was not collected: the test proves nothing"
        _finalizer._reaper.drain(5.0)
    assert closes == [1], "the finalizer did not hand its close to the reaper"
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert wait_no_threads(before.threads, timeout=2.0) == []
