"""The two ways the gateway reaches an upstream: a child process (stdio) or a URL (HTTP).

Both give :class:`~mcpsync.gateway._upstream.Upstream` the same small face: ``start``,
``send`` one frame, ``read`` until the connection ends (handing each incoming frame over as
bytes), ``close``.

- :class:`StdioConn` keeps the upstream's own bytes: its stdout lines come from
  :class:`~mcpsync.gateway._rawstdio.RawStdioTransport` undecoded.
- :class:`HttpConn` uses the client's Streamable HTTP transport (both eras, sessions,
  resumption, OAuth) with the credentials of its own config entry only. The host's frame is
  POSTed as its own bytes; but that transport decodes what the server sends back (a JSON body
  or SSE events) into messages, so those are re-serialised (:func:`mcpsync.jsonrpc.serialize`):
  members and key order survive, while number spellings (``1.50``) and escapes inside a value
  come out in their canonical form. An exchange that failed at the HTTP level (5xx, 401 after
  a login attempt, an expired session) comes back as a JSON-RPC error naming the upstream.
"""

from __future__ import annotations

import importlib
import json
import logging
import select
from collections.abc import Callable, Mapping
from typing import Any, Final

from mcpsync._envelope import Envelope, IdKey
from mcpsync.config import ServerConfig
from mcpsync.errors import MCPError
from mcpsync.gateway._rawstdio import RawStdioTransport
from mcpsync.gateway._redact import redact_for_log
from mcpsync.jsonrpc import MAX_FRAME_BYTES, Batch, Message, ParseError, serialize
from mcpsync.secrets import (
    SecretFile,
    SecretResolver,
    apply_header_secrets,
    apply_placeholders,
    write_secret_file,
)
from mcpsync.transport.base import CallFailed, WriteTimedOut

__all__ = ["PIPE_ATOMIC", "Conn", "HttpConn", "StdioConn", "open_conn"]

_log = logging.getLogger("mcpsync.gateway")
#: Writes up to this size to a pipe are atomic (POSIX PIPE_BUF; 4096 on Linux).
PIPE_ATOMIC: Final = getattr(select, "PIPE_BUF", 512)

OnLine = Callable[[bytes], None]
OnFailed = Callable[[IdKey, str], None]   # (the call's id key, why)
OnLines = Callable[[list[bytes]], None]   # the lines of one read


class Conn:
    """What an upstream connection offers; see the module docstring."""

    pid: int | None = None

    def start(self) -> None:
        raise NotImplementedError

    def send(self, envelope: Envelope) -> None:
        raise NotImplementedError

    def try_send(self, envelope: Envelope) -> bool:
        """Send now if that cannot block; ``False``: nothing sent, queue it instead."""
        return False

    def try_send_raw(self, data: bytes) -> bool:
        """Send ``data`` (whole frames with their newlines, as the host wrote them) now if
        that cannot block; ``False``: nothing sent, queue the frames instead."""
        return False

    def write_now(self, data: bytes) -> bool:
        """As :meth:`try_send_raw` for ``data`` known to fit in ``PIPE_BUF`` (the gateway's
        host loop checks that itself): one call less on its path."""
        return False

    def read(self, on_line: OnLine, on_failed: OnFailed,
             on_lines: OnLines | None = None) -> str:
        """Hand over incoming frames until the connection ends; return why it ended.
        Raises nothing: stream errors become the returned reason. ``on_lines``, when given,
        gets the frames of each read together instead (where the connection reads lines:
        stdio); ``on_line`` gets them one by one otherwise."""
        raise NotImplementedError

    def running(self) -> bool:
        raise NotImplementedError

    def exit_code(self, timeout: float) -> int | None:
        return None

    def stderr_excerpt(self) -> str:
        """The last lines the server wrote on stderr (stdio), for the gateway's log."""
        return ""

    def close(self) -> None:
        raise NotImplementedError

    def session(self) -> dict[str, str] | None:
        """The upstream session another gateway process could carry on (HTTP), or None."""
        return None

    def resume(self, session: Mapping[str, str], init_params: dict[str, Any]) -> bool:
        """Carry on ``session`` (from :meth:`session` in another process) instead of a
        handshake; ``False``: this kind of connection cannot, replay the handshake."""
        return False


class StdioConn(Conn):
    """A child process; its stdout lines are forwarded as they were written."""

    def __init__(self, config: ServerConfig, name: str, on_stderr: Callable[[str], None],
                 max_frame_bytes: int, secret_resolver: SecretResolver | None = None) -> None:
        # A secret_ref gets what the Manager gives a spawn: a fresh 0600 file whose path
        # fills {{secret_file}}, deleted when this connection (this process) closes.
        self._secret: SecretFile | None = None
        if config.secret_ref and secret_resolver is not None:
            self._secret = write_secret_file(config, secret_resolver)
        try:
            config = apply_placeholders(config, secret_file=self._secret.path
                                        if self._secret is not None else None)
            self._transport = RawStdioTransport(config.argv, name=name, env=config.env,
                                                cwd=config.cwd, on_stderr=on_stderr,
                                                max_frame_bytes=max_frame_bytes)
        except BaseException:
            if self._secret is not None:
                self._secret.remove()
            raise
        self.write_now = self._transport.write_now   # type: ignore[method-assign]

    @property
    def transport(self) -> RawStdioTransport:
        """The transport itself: the gateway's pass-through loop reads its stdout."""
        return self._transport

    def start(self) -> None:
        try:
            self._transport.start()
        except BaseException:
            self.close()
            raise
        self.pid = self._transport.pid

    def send(self, envelope: Envelope) -> None:
        self._transport.send_bytes(envelope.to_bytes())

    def try_send(self, envelope: Envelope) -> bool:
        """Only a frame that fits in ``PIPE_BUF`` with its newline: the kernel writes such a
        frame to a non-blocking pipe whole or not at all. A larger one could go out in part,
        and the transport tears a connection down when the rest of a frame is not taken
        within seconds, which a synchronous server busy in a long call must not suffer; so
        larger frames wait for the writer thread, which waits as long as the server does."""
        frame = envelope.to_bytes()
        t = self._transport
        if len(frame) >= PIPE_ATOMIC or t.ended:
            return False
        try:
            t.send_bytes_until(frame, 0.0)
        except WriteTimedOut:   # the pipe is full: nothing went out
            return False
        except MCPError:   # closed: the writer thread restarts the server
            return False
        return True

    def try_send_raw(self, data: bytes) -> bool:
        """As :meth:`try_send`, for a read of the host's frames passed on whole: only when it
        fits in ``PIPE_BUF``."""
        return len(data) <= PIPE_ATOMIC and self._transport.write_now(data)

    def read(self, on_line: OnLine, on_failed: OnFailed,
             on_lines: OnLines | None = None) -> str:
        receive = self._transport.receive_lines
        try:
            if on_lines is not None:   # each read's lines at once
                while True:
                    lines = receive(None)
                    if lines is None:
                        return "it closed its output"
                    if lines:
                        on_lines(lines)
            while True:
                lines = receive(None)
                if lines is None:
                    return "it closed its output"
                for line in lines:
                    on_line(line)
        except MCPError as exc:   # StreamError: an over-long line, a broken pipe
            return str(exc)

    def running(self) -> bool:
        t = self._transport
        return not t.closed and t.returncode() is None

    def exit_code(self, timeout: float) -> int | None:
        return self._transport.wait_exit(timeout)

    def stderr_excerpt(self) -> str:
        return self._transport.stderr_excerpt()

    def close(self) -> None:
        self._transport.close()
        if self._secret is not None:
            self._secret.remove()


class HttpConn(Conn):
    """A Streamable HTTP server (or a 2024-11-05 HTTP+SSE one), through our HTTP transport."""

    def __init__(self, config: ServerConfig, name: str, max_frame_bytes: int,
                 secret_resolver: SecretResolver | None = None) -> None:
        importlib.import_module("mcpsync.auth_hooks")
        from mcpsync.auth_hooks import make_auth
        importlib.import_module("mcpsync.transport.http")
        from mcpsync.transport.http import HttpTransport

        if config.secret_ref and secret_resolver is not None:
            # As the Manager does: {{secret:KEY}} in a header, resolved for each connection.
            config = apply_header_secrets(config, secret_resolver)
        assert config.url is not None
        self._name = name
        self._transport = HttpTransport(
            config.url, name=name, headers=dict(config.headers),
            auth=make_auth(config.auth, config.authorization, config.on_unauthorized),
            max_frame_bytes=max_frame_bytes, transport=config.transport)
        self._init_id: IdKey | None = None
        self._init_params: dict[str, Any] = {}

    def start(self) -> None:
        return None   # the first POST opens the connection

    def send(self, envelope: Envelope) -> None:
        if envelope.method == "initialize" and envelope.id_key is not None:
            params = envelope.raw("params")
            decoded = json.loads(params) if params is not None else {}
            self._init_params = decoded if isinstance(decoded, dict) else {}
            self._init_id = envelope.id_key
        self._transport.send_bytes(envelope.to_bytes())

    def read(self, on_line: OnLine, on_failed: OnFailed,
             on_lines: OnLines | None = None) -> str:
        try:
            while True:
                items = self._transport.receive(None)
                if items is None:
                    return "the HTTP connection was closed"
                for item in items:
                    if isinstance(item, CallFailed):
                        on_failed(item.id.key, str(item.error))
                    elif isinstance(item, Batch):
                        for each in item:
                            if isinstance(each, Message):
                                self._hand_over(each, on_line, on_failed)
                    elif isinstance(item, Message):
                        self._hand_over(item, on_line, on_failed)
                    elif isinstance(item, ParseError):
                        _log.warning("upstream %r sent a message that is not JSON-RPC "
                                     "(dropped): %s", self._name, redact_for_log(str(item)))
        except MCPError as exc:
            return str(exc)

    def _hand_over(self, message: Message, on_line: OnLine, on_failed: OnFailed) -> None:
        if (message.id is not None and message.id.key == self._init_id
                and isinstance(message.result, dict)):
            # A legacy handshake: the transport must know the version (its header on every
            # later POST) before the host's notifications/initialized goes out.
            importlib.import_module("mcpsync.transport.http._transport")
            from mcpsync.transport.http._transport import SessionState
            version = str(message.result.get("protocolVersion", ""))
            self._transport.session_updated(SessionState("legacy", version, self._init_params))
            self._init_id = None
        try:
            frame = serialize(message)
        except ValueError as exc:
            # The transport decoded a number beyond a double's range (1E400) to infinity,
            # which JSON cannot carry: fail that call alone, as for any broken exchange,
            # instead of letting the error end this upstream's reader (every later call to
            # it would then wait forever).
            why = (f"the server's message could not be passed on: {exc} (a number beyond "
                   "the range of a double, which the gateway cannot re-encode from HTTP)")
            if message.id is not None and message.method is None:
                on_failed(message.id.key, why)
            else:
                _log.warning("upstream %r: dropped a %s: %s", self._name,
                             message.method or "message", why)
            return
        on_line(frame)

    def running(self) -> bool:
        return not self._transport.closed

    def close(self) -> None:
        self._transport.close()

    def session(self) -> dict[str, str] | None:
        found = self._transport.legacy_session
        return None if found is None else {"session": found[0], "version": found[1]}

    def resume(self, session: Mapping[str, str], init_params: dict[str, Any]) -> bool:
        importlib.import_module("mcpsync.transport.http._transport")
        from mcpsync.transport.http._transport import SessionState

        version = session.get("version") or str(init_params.get("protocolVersion", ""))
        self._transport.resume_session(session.get("session"),
                                       SessionState("legacy", version, init_params))
        return True


def open_conn(config: ServerConfig, name: str, on_stderr: Callable[[str], None],
              max_frame_bytes: int = MAX_FRAME_BYTES,
              secret_resolver: SecretResolver | None = None) -> Conn:
    """The connection for ``config``: HTTP for a URL, stdio for a command (with its secret
    file when it has a ``secret_ref``)."""
    if config.is_http:
        return HttpConn(config, name, max_frame_bytes, secret_resolver)
    return StdioConn(config, name, on_stderr, max_frame_bytes, secret_resolver)
