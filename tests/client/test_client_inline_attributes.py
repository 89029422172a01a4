"""A connected client holds few enough attributes for CPython 3.11 to keep them inline in
the instance (29 at most; beyond that its instance dict is a real dict, and every attribute
load on it, half a dozen per ``call_tool``, takes the slower hinted lookup). What its calls
never read is kept in ``client._aside`` (``ClientAside``) instead. Counted over stdio and
HTTP, in both eras, after a call and again after the close."""

from __future__ import annotations

import sys
import threading
import typing

import pytest
from http_peers.fault_server import FaultServer

import mcpsync
from mcpsync.client._lifecycle import ClientAside
from mcpsync.types import ServerInfo

pytestmark = pytest.mark.timeout(60)

#: The most attributes CPython 3.11 and 3.12 keep inline in an instance.
INLINE_MAX = 29

DEMO = [sys.executable, "-m", "mcpsync.demo"]


def _check(client: mcpsync.Client, echo: dict[str, str], text: str) -> None:
    assert client.call_tool("echo", echo).text == text
    assert client.call_tool("echo", echo).text == text
    # vars() makes the instance dict real: asked after the calls.
    names = vars(client)
    assert len(names) <= INLINE_MAX, sorted(names)
    assert type(client._aside) is ClientAside
    client.close()
    names = vars(client)
    assert client.closed
    assert len(names) <= INLINE_MAX, sorted(names)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_stdio_client_holds_no_more_attributes_than_are_kept_inline(no_leaks: None,
                                                                       era: str) -> None:
    client = mcpsync.connect(DEMO, era=era, timeout=20)
    try:
        assert client.era == era
        _check(client, {"text": "hi"}, "hi")
    finally:
        client.close()


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_an_http_client_holds_no_more_attributes_than_are_kept_inline(
        no_leaks: None, fault_server: FaultServer, era: str) -> None:
    fault_server.faults.era = era
    client = mcpsync.connect(fault_server.url, era=era, timeout=10)
    try:
        assert client.era == era
        _check(client, {"text": "hi"}, "hi")
    finally:
        client.close()


def test_the_aside_holds_what_was_moved(no_leaks: None) -> None:
    with mcpsync.connect(DEMO, era="legacy", timeout=20) as client:
        aside = client._aside
        assert aside.in_process is None and aside.http is None
        assert aside.redetected_from is None and aside.close_rest is False
        assert len(aside.restarts) == 0
        assert type(aside.restart_lock) is type(threading.Lock())
        assert aside.safe_name and aside.server_log.name == f"mcpsync.server.{aside.safe_name}"
        assert aside.resources.session is client._session
        assert aside.finalizer.alive
        # What the properties return is the handshake's, kept aside.
        assert isinstance(aside.server_info, ServerInfo) and client.server_info is aside.server_info
        assert client.instructions is aside.instructions
        assert client.handshake_result == aside.handshake_result
        assert aside.handshake_result["serverInfo"]["name"] == client.server_info.name
        client._close_early()
        assert aside.close_rest is True
    assert aside.close_rest is False and not aside.finalizer.alive


def test_a_client_has_no_aside_attributes_of_its_own(no_leaks: None) -> None:
    """The moved names are gone from the client: a reader left on the old name fails."""
    with mcpsync.connect(DEMO, era="legacy", timeout=20) as client:
        client.call_tool("echo", {"text": "x"})
        for name in ClientAside.__slots__:
            assert not hasattr(client, f"_{name}"), name


def test_the_asides_annotations_resolve() -> None:
    """As the client's own did (the HTTP settings' and the memory transport's types are
    named through attributes that load their modules)."""
    hints = typing.get_type_hints(ClientAside)
    assert {"in_process", "http", "finalizer", "resources", "notes"} <= set(hints)
