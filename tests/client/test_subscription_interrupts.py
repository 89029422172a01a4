"""Ctrl-C during a subscription change, and acknowledgements that arrive late.

A change (``subscribe``, ``on_list_changed``, ``watch_task``, closing one of several handles)
opens a new ``subscriptions/listen`` and waits for the server's acknowledgement; then it
re-opens whatever a restart left due. A Ctrl-C in either wait must leave nothing behind: no
listen open on the server that the client no longer knows (its notifications would keep
coming, and it would hold one of the connection's listens until the client closes), and no
handle registered that the caller never received (its callback would fire, and nobody could
close it). The next change then leaves one listen with exactly the handles' union.

What the server really keeps open is seen on the wire: every notification a listen carries
is tagged with its ``subscriptionId``, and a ``notification_observer`` sees them all, also
those the client drops because they come from a listen it has replaced.

One test is about identity: an acknowledgement names its listen, and one that comes late,
for a listen given up already, must not be taken for the acknowledgement of the next.

A real SIGINT is sent only once the main thread is seen (in its Python frames) where it
blocks, so the tests do not depend on how fast a loaded machine gets there.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS, one_listen, wait_until

import mcpsync
from mcpsync.protocol import META_SUBSCRIPTION_ID

pytestmark = pytest.mark.timeout(30)

FEATURES = [sys.executable, str(PEERS / "feature_server.py")]
EXTENSIONS = Path(__file__).parents[1] / "server" / "peers_http" / "extensions_server.py"


class Observed:
    """Every notification the client received, as ``(method, subscriptionId, params)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, Any, Any]] = []

    def __call__(self, method: str, params: Any) -> None:
        meta = params.get("_meta") if isinstance(params, dict) else None
        sid = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        with self.lock:
            self.seen.append((method, sid, params))

    def sids(self, method: str) -> list[Any]:
        with self.lock:
            return [sid for m, sid, _ in self.seen if m == method]


def _updates_from(client: mcpsync.Client, observed: Observed, uri: str) -> list[Any]:
    """Touch ``uri`` twice and return the ``subscriptionId`` of every update the client
    received for it. The server coalesces the updates of one URI that it has not announced
    yet, so the second touch waits until the current listen heard of the first. Within
    one announcement every listen is told, in the order they were opened, and the stream is
    ordered: once the current listen has the second touch's update, every listen's update
    of the first touch is in (those of listens opened after the current one too), and of
    the second, those of the listens opened before it."""
    def updates() -> list[Any]:
        with observed.lock:
            return [sid for m, sid, p in observed.seen
                    if m == "notifications/resources/updated" and p.get("uri") == uri]

    before = len(updates())
    current = client._subs._listen
    assert current is not None and current.request_key is not None
    for count in (1, 2):
        assert client.call_tool("touch", {"uri": uri}).text == "touched"
        assert wait_until(lambda n=count: updates()[before:].count(current.request_key[1]) >= n), (
            current.request_key, before, updates(),
            [(ls.request_key, ls.filter, ls.superseded) for ls in client._subs._listens])
    return updates()[before:]


def _hold_acks(subs: Any, *, deliver: Callable[[Any], bool]) -> list[Any]:
    """Keep the acknowledgements that ``deliver(params)`` refuses from the client (as if they
    were late); return the list they are kept in."""
    held: list[Any] = []
    real = subs.acknowledged

    def acknowledged(params: Any) -> None:
        if deliver(params):
            real(params)
        else:
            held.append(params)

    subs.acknowledged = acknowledged
    return held


def _newest_listen(subs: Any) -> Any:
    with subs._lock:
        return subs._listens[-1]


def _sigint_once_in(blocked: Callable[[Any], bool]) -> threading.Thread:
    """Send one real SIGINT to the main thread as soon as its innermost Python frame is
    ``blocked(frame)`` (it is then in, or about to enter, the C call that blocks), however
    long it takes to get there; return the sender thread, to be joined."""
    main = threading.main_thread().ident
    assert main is not None
    # Not before start() has returned: start() itself waits in threading (for the new
    # thread to run), and a SIGINT there would not test the wait that matters.
    armed = threading.Event()

    def send() -> None:
        armed.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(main)
            if frame is not None and blocked(frame):
                signal.pthread_kill(main, signal.SIGINT)
                return
            time.sleep(0.005)

    sender = threading.Thread(target=send, name="test-sigint", daemon=True)
    sender.start()
    armed.set()
    return sender


def _in_threading_wait(frame: Any) -> bool:
    return bool(frame.f_code.co_filename == threading.__file__
                and frame.f_code.co_name == "wait")


class _SigintWhileWaiting(threading.Event):
    """An event whose ``wait`` gets a real SIGINT from another thread once it is blocked
    (one SIGINT, however many slices the main thread waits in). Its sender is joined when
    the wait raises; use it only for a wait that the SIGINT ends (the acknowledgement
    held back), or the sender polls on and may signal a later wait."""

    sender: threading.Thread | None = None

    def wait(self, timeout: float | None = None) -> bool:
        if self.sender is None:
            self.sender = _sigint_once_in(_in_threading_wait)
        try:
            return super().wait(timeout)
        except BaseException:
            self.sender.join()
            raise


class _InterruptedWait(threading.Event):
    """An event whose ``wait`` raises KeyboardInterrupt, as Ctrl-C landing there does."""

    def wait(self, timeout: float | None = None) -> bool:
        raise KeyboardInterrupt


def _interrupt_the_next_ack_wait(subs: Any, event: type[threading.Event]) -> None:
    """The next listen's wait for its acknowledgement is interrupted by Ctrl-C."""
    real = subs._submit_listen

    def submit(params: dict[str, Any]) -> Any:
        subs._submit_listen = real
        future = real(params)
        _newest_listen(subs).acked = event()
        return future

    subs._submit_listen = submit


# -- Ctrl-C while a new listen waits for its acknowledgement -----------------------------------


def test_ctrl_c_while_a_subscribe_waits_for_the_acknowledgement(no_leaks: None) -> None:
    """A real SIGINT while the new listen (greeting + logo) waits for an acknowledgement
    that does not come: the listen is cancelled on the wire and forgotten, the old listen
    (greeting) stays current and is the only one the server tells, and the next change
    opens one listen with every handle."""
    assert threading.current_thread() is threading.main_thread()
    observed = Observed()
    greeting = threading.Event()
    with mcpsync.connect(FEATURES, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        old = subs._listen
        assert old is not None
        held = _hold_acks(subs, deliver=lambda params: False)
        _interrupt_the_next_ack_wait(subs, _SigintWhileWaiting)
        with pytest.raises(KeyboardInterrupt):
            client.subscribe("memo://logo", lambda uri: None)
        assert wait_until(lambda: len(held) == 1)   # the server did open it, and acknowledged it
        del subs.acknowledged
        interrupted = held[0]["_meta"][META_SUBSCRIPTION_ID]
        assert list(subs._by_uri) == ["memo://greeting"]
        assert subs._listen is old and not old.superseded and not subs._reopen_due
        assert wait_until(lambda: subs._listens == [old]), f"listens left open: {subs._listens}"
        # The server no longer tells the interrupted listen anything: it was cancelled.
        sids = _updates_from(client, observed, "memo://greeting")
        assert interrupted not in sids and set(sids) == {old.request_key[1]}
        assert greeting.is_set()
        client.subscribe("memo://logo", lambda uri: None)
        one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})
        assert old.superseded


def test_ctrl_c_as_the_new_listen_is_written_cancels_it_on_the_wire(no_leaks: None) -> None:
    """The KeyboardInterrupt comes out of the session's write of the new listen, after the
    frame went out (as a SIGINT handled when the write's last C call returns): the listen
    has no future yet, so the change only forgets it, and the session cancels it on the
    wire. The server then tells the old listen only."""
    observed = Observed()
    with mcpsync.connect(FEATURES, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        old = subs._listen
        assert old is not None
        session = client._session
        real = session._send

        def send(call: Any, frame: bytes, attended: bool) -> Any:
            result = real(call, frame, attended)
            if call.method == "subscriptions/listen":
                del session._send
                raise KeyboardInterrupt
            return result

        session._send = send
        with pytest.raises(KeyboardInterrupt):
            client.subscribe("memo://logo", lambda uri: None)
        assert list(subs._by_uri) == ["memo://greeting"]
        assert subs._listen is old and subs._listens == [old]
        assert set(_updates_from(client, observed, "memo://greeting")) == {old.request_key[1]}
        client.subscribe("memo://logo", lambda uri: None)
        one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})


def test_ctrl_c_while_closing_one_of_two_handles_waits_for_the_acknowledgement(
        no_leaks: None) -> None:
    """Closing one of two handles opens a listen for the other only; Ctrl-C while it waits:
    the handle is closed (and hears nothing more), the old listen for both stays current
    until the next change, which re-opens with the handles left."""
    observed = Observed()
    logo_heard: list[str] = []
    with mcpsync.connect(FEATURES, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        logo = client.subscribe("memo://logo", logo_heard.append)
        both = subs._listen
        assert both is not None
        _interrupt_the_next_ack_wait(subs, _InterruptedWait)
        with pytest.raises(KeyboardInterrupt):
            logo.close()
        assert logo.closed and list(subs._by_uri) == ["memo://greeting"]
        assert subs._listen is both and not both.superseded
        assert wait_until(lambda: subs._listens == [both]), f"listens left open: {subs._listens}"
        sids = _updates_from(client, observed, "memo://logo")
        assert set(sids) == {both.request_key[1]} and not logo_heard
        client.on_list_changed("tools", lambda kind: None)
        one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})


def test_the_callback_of_an_interrupted_subscribe_may_run_before_the_ctrl_c(
        no_leaks: None) -> None:
    """The handle is registered while the change is under way, and the listen open before
    may already ask for its URI (here the listen for three URIs, two of whose handles were
    closed by an interrupted ``close()``): an update then reaches the new callback before
    the Ctrl-C. Afterwards, nothing reaches it."""
    observed = Observed()
    heard: list[str] = []
    with mcpsync.connect(FEATURES, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        for handle in [client.subscribe(uri, lambda uri: None)
                       for uri in ("memo://logo", "memo://notes/a")]:
            _interrupt_the_next_ack_wait(subs, _InterruptedWait)
            with pytest.raises(KeyboardInterrupt):
                handle.close()
        assert subs._listen is not None
        assert subs._listen.filter == {"resourceSubscriptions": [
            "memo://greeting", "memo://logo", "memo://notes/a"]}

        class TouchThenInterrupt(threading.Event):
            def wait(self, timeout: float | None = None) -> bool:
                touch = threading.Thread(
                    target=client.call_tool, args=("touch", {"uri": "memo://logo"}),
                    name="test-touch")
                touch.start()
                touch.join(10)
                assert wait_until(lambda: bool(heard))
                raise KeyboardInterrupt

        _interrupt_the_next_ack_wait(subs, TouchThenInterrupt)
        with pytest.raises(KeyboardInterrupt):
            client.subscribe("memo://logo", heard.append)
        assert heard == ["memo://logo"] and list(subs._by_uri) == ["memo://greeting"]
        _updates_from(client, observed, "memo://logo")
        assert heard == ["memo://logo"]


def test_ctrl_c_while_the_reopening_waits_for_the_acknowledgement(no_leaks: None) -> None:
    """Ctrl-C while the listen that a restart's re-opening opened waits (the re-opening
    called here as a restart calls it): the listen is cancelled and forgotten, the
    re-opening stays due, and the next change does it."""
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        old = subs._listen
        assert old is not None
        _interrupt_the_next_ack_wait(subs, _InterruptedWait)
        with pytest.raises(KeyboardInterrupt):
            subs.reopen()
        assert subs._reopen_due and subs._listen is None and old.superseded
        assert wait_until(lambda: not subs.listening), f"listens left open: {subs._listens}"
        client.on_list_changed("tools", lambda kind: None)
        assert not subs._reopen_due
        one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})
        greeting.clear()
        assert client.call_tool("touch", {"uri": "memo://greeting"}).text == "touched"
        assert greeting.wait(10)


def test_ctrl_c_as_the_replaced_listen_is_retired_is_ended_by_the_next_change(
        no_leaks: None) -> None:
    """A real SIGINT as the change starts ending the listen it replaced (on entering
    ``_retire``, after the new listen became current): the old listen stays open on the
    server for now; the next change ends it before anything else, so the server then tells
    the current listen only."""
    assert threading.current_thread() is threading.main_thread()
    observed = Observed()
    with mcpsync.connect(FEATURES, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        old = subs._listen
        assert old is not None
        real = type(subs)._retire

        def retire(listen: Any) -> None:
            del subs._retire
            signal.raise_signal(signal.SIGINT)
            real(subs, listen)

        subs._retire = retire
        with pytest.raises(KeyboardInterrupt):
            client.subscribe("memo://logo", lambda uri: None)
        new = subs._listen
        assert new is not old and new is not None and not old.superseded
        assert set(_updates_from(client, observed, "memo://greeting")) == {
            old.request_key[1], new.request_key[1]}   # the stray is still open
        assert list(subs._by_uri) == ["memo://greeting"]   # no handle from the call
        client.subscribe("memo://notes/a", lambda uri: None)
        assert old.superseded
        current = one_listen(client, {"resourceSubscriptions": [
            "memo://greeting", "memo://notes/a"]})
        assert set(_updates_from(client, observed, "memo://greeting")) == {
            current.request_key[1]}


def test_a_listen_that_never_went_out_leaves_the_table_at_the_next_change(
        no_leaks: None) -> None:
    """A listen left in the table without a request (a Ctrl-C as it was given up, before
    it left the table) would be the oldest listen waiting, the one an acknowledgement
    without an id goes to; the next change takes it out."""
    from mcpsync.client._subscribing import _Listen

    with mcpsync.connect(FEATURES) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        stray = _Listen(filter={"resourceSubscriptions": ["memo://greeting"]})
        with subs._lock:
            subs._listens.insert(0, stray)
        client.subscribe("memo://logo", lambda uri: None)
        assert stray not in subs._listens
        one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})


# -- Ctrl-C in the re-opening at the end of a change ------------------------------------------


def _interrupt_the_final_reopening(subs: Any) -> None:
    """The re-opening at the end of the next change is interrupted by Ctrl-C."""
    def interrupted() -> None:
        del subs._reopen_now
        raise KeyboardInterrupt

    subs._reopen_now = interrupted


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_ctrl_c_in_the_reopening_after_a_subscribe_makes_no_handle(
        era: str, no_leaks: None) -> None:
    """The subscribe raised, so the caller has no handle to close: none stays registered,
    and its callback never fires, although the server still sends the update (until the
    next change, modern; legacy keeps the URI subscribed on the server)."""
    observed = Observed()
    heard: list[str] = []
    with mcpsync.connect(FEATURES, era=era, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        _interrupt_the_final_reopening(subs)
        with pytest.raises(KeyboardInterrupt):
            client.subscribe("memo://logo", heard.append)
        assert list(subs._by_uri) == ["memo://greeting"]
        assert client.call_tool("touch", {"uri": "memo://logo"}).text == "touched"
        # The observer sees a notification after it was routed to the callbacks.
        assert wait_until(lambda: len(observed.sids("notifications/resources/updated")) == 1)
        assert not heard
        client.on_list_changed("tools", lambda kind: None)
        if era == "modern":
            one_listen(client, {"toolsListChanged": True,
                                 "resourceSubscriptions": ["memo://greeting"]})
        assert not subs._wire._is_owned()   # type: ignore[attr-defined]


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_ctrl_c_in_the_reopening_after_on_list_changed_makes_no_handle(
        era: str, no_leaks: None) -> None:
    observed = Observed()
    heard: list[str] = []
    with mcpsync.connect(FEATURES, era=era, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        _interrupt_the_final_reopening(subs)
        with pytest.raises(KeyboardInterrupt):
            client.on_list_changed("tools", heard.append)
        assert not subs._by_kind
        client.call_tool("add_extra", {"name": "extra"})
        # The observer sees a notification after it was routed to the callbacks.
        assert wait_until(lambda: bool(observed.sids("notifications/tools/list_changed")))
        assert not heard
        if era == "modern":
            client.subscribe("memo://logo", lambda uri: None)
            one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})


def test_ctrl_c_in_the_reopening_after_watch_task_makes_no_handle(
        tmp_path: Path, no_leaks: None) -> None:
    (tmp_path / "skills").mkdir()
    observed = Observed()
    heard: list[Any] = []
    with mcpsync.connect([sys.executable, str(EXTENSIONS), str(tmp_path / "skills")],
                         era="modern", notification_observer=observed) as client:
        subs = client._subs
        client.on_list_changed("tools", lambda kind: None)
        future = client.submit_tool("slow_sum", {"a": 1, "b": 2, "seconds": 0.5})
        assert wait_until(lambda: future.task is not None), "the task was not created"
        assert future.task is not None
        _interrupt_the_final_reopening(subs)
        with pytest.raises(KeyboardInterrupt):
            client.watch_task(future.task.task_id, heard.append)
        assert not subs._by_task
        assert future.result(10).text == "3"
        assert wait_until(lambda: bool(observed.sids("notifications/tasks")))
        assert not heard
        assert subs._listen is not None and "taskIds" in subs._listen.filter
        client.on_list_changed("tools", lambda kind: None)   # the next change
        one_listen(client, {"toolsListChanged": True})


class _SigintOnRelease:
    """The change lock, whose release raises a real SIGINT in this thread once armed: Python
    runs the handler as the release returns, which is where a Ctrl-C that came during the
    change's last C call surfaces, after every handler inside the ``with``."""

    def __init__(self, real: Any) -> None:
        self.real, self.armed = real, False

    def __enter__(self) -> Any:
        return self.real.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        result = self.real.__exit__(*exc)
        if self.armed and not self.real._is_owned():
            self.armed = False
            signal.raise_signal(signal.SIGINT)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_ctrl_c_as_a_subscribe_releases_the_change_lock_makes_no_handle(
        era: str, no_leaks: None) -> None:
    """The change is done, the lock released, and the KeyboardInterrupt comes out of the
    release: the caller gets no handle, so none may stay registered with its callback."""
    assert threading.current_thread() is threading.main_thread()
    observed = Observed()
    heard: list[str] = []
    with mcpsync.connect(FEATURES, era=era, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        wire = subs._wire
        subs._wire = lock = _SigintOnRelease(wire)
        lock.armed = True
        try:
            with pytest.raises(KeyboardInterrupt):
                client.subscribe("memo://logo", heard.append)
        finally:
            subs._wire = wire
        assert not lock.armed and not wire._is_owned()
        assert list(subs._by_uri) == ["memo://greeting"]
        assert client.call_tool("touch", {"uri": "memo://logo"}).text == "touched"
        # The observer sees a notification after it was routed to the callbacks.
        assert wait_until(lambda: len(observed.sids("notifications/resources/updated")) == 1)
        assert not heard
        if era == "modern":
            client.on_list_changed("tools", lambda kind: None)
            one_listen(client, {"toolsListChanged": True,
                                 "resourceSubscriptions": ["memo://greeting"]})


# -- a late acknowledgement --------------------------------------------------------------------


def test_a_late_acknowledgement_is_not_taken_for_the_next_listens(no_leaks: None) -> None:
    """A listen (greeting + notes) is given up for want of an acknowledgement; the next
    (greeting + logo) goes out, and the late acknowledgement of the first comes in before
    the client has noted the second's request id: it names the first listen, so it must not
    acknowledge the second, whose own acknowledgement grants the logo."""
    with mcpsync.connect(FEATURES) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        held = _hold_acks(subs, deliver=lambda params: False)
        ack_timeout, subs._ack_timeout = subs._ack_timeout, lambda: 0.5
        with pytest.raises(mcpsync.ProtocolError, match="did not acknowledge"):
            client.subscribe("memo://notes/a", lambda uri: None)
        del subs.acknowledged
        subs._ack_timeout = ack_timeout
        assert wait_until(lambda: len(held) == 1)
        late = held[0]
        assert late["notifications"]["resourceSubscriptions"] == ["memo://greeting",
                                                                  "memo://notes/a"]
        # Every acknowledgement waits until the next listen went out; then the late one
        # comes first, as if the dispatcher had it just now, and the others after it.
        held = _hold_acks(subs, deliver=lambda params: False)
        real = subs._submit_listen

        def submit_then_the_late_ack(params: dict[str, Any]) -> Any:
            subs._submit_listen = real
            future = real(params)
            assert wait_until(lambda: len(held) == 1)   # the new listen's own acknowledgement
            del subs.acknowledged
            for params in [late, *held]:
                subs.acknowledged(params)
            return future

        subs._submit_listen = submit_then_the_late_ack
        client.subscribe("memo://logo", lambda uri: None)
        listen = one_listen(client, {"resourceSubscriptions": ["memo://greeting",
                                                                "memo://logo"]})
        assert listen.ack == {"resourceSubscriptions": ["memo://greeting", "memo://logo"]}


# -- Ctrl-C in close() ------------------------------------------------------------------------


def test_ctrl_c_while_close_waits_for_another_threads_change(no_leaks: None) -> None:
    """``close()`` waits for the change lock while another thread's change holds it; a real
    SIGINT there: the handle is closed, and closed means it hears nothing more (a second
    ``close()`` does nothing, so a handle left in the table could never be closed). The
    server still sends its updates until the next change, which re-opens without it."""
    assert threading.current_thread() is threading.main_thread()
    observed = Observed()
    heard: list[str] = []
    with mcpsync.connect(FEATURES, notification_observer=observed) as client:
        subs = client._subs
        client.subscribe("memo://greeting", lambda uri: None)
        logo = client.subscribe("memo://logo", heard.append)
        taken, done = threading.Event(), threading.Event()

        def hold_the_change_lock() -> None:
            with subs._wire:
                taken.set()
                done.wait(10)

        holder = threading.Thread(target=hold_the_change_lock, name="test-hold-wire")
        holder.start()
        try:
            assert taken.wait(5)
            sender = _sigint_once_in(lambda frame: (
                frame.f_code.co_name == "remove"
                and frame.f_code.co_filename.endswith("_subscriptions.py")))
            try:
                with pytest.raises(KeyboardInterrupt):
                    logo.close()
            finally:
                sender.join()
        finally:
            done.set()
            holder.join()
        assert logo.closed and list(subs._by_uri) == ["memo://greeting"]
        sids = _updates_from(client, observed, "memo://logo")
        assert sids and not heard
        logo.close()   # nothing to do
        client.on_list_changed("tools", lambda kind: None)
        one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})
