"""The web-page approver: a page on its own loopback port lists held calls to approve or reject.

Who can approve matters more than how. The page must not be reachable by the agent whose
calls it approves, nor by a web page that agent (or anyone) gets the user's browser to open:

- **Its own port**, never the MCP port: a host that can reach the gateway's MCP endpoint
  cannot approve its own calls by posting there.
- **Loopback only**, and the ``Host`` header must name the loopback address and port, so a
  DNS-rebinding page (``evil.example`` resolving to 127.0.0.1) gets 403.
- **A secret token of this run in the URL** (``http://127.0.0.1:PORT/TOKEN/``): without it
  every request is 403. The URL is printed to the gateway's stderr when it starts, never
  to the MCP stream, and appears in no repr or error text.
- **A CSRF token in each form**, an HMAC of the held call's ticket under another secret of
  this run, compared with ``hmac.compare_digest``; a POST without the right one is 403. A
  cross-site ``Origin`` or ``Sec-Fetch-Site`` is 403 too, and there are no CORS headers,
  so another origin can neither post a decision nor read the page's tokens.
- **Single use**: a decision names the held call's ticket and digest; the ticket leaves the
  list when decided, so a replayed POST changes nothing and is answered 409 saying so, and
  a digest other than the held call's is 409 as well.

Responses carry ``Cache-Control: no-store`` and ``Referrer-Policy: no-referrer`` (the token
is in the URL), and a content security policy without scripts: the page is plain HTML
forms, refreshed every few seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs

from mcpsync.gateway._guard._approval import ApproverBase, HeldCall, Verdict
from mcpsync.gateway._guard._approvers._summary import redacted_arguments
from mcpsync.server.http._builtin import WsgiServer

__all__ = ["LOOPBACK_HOSTS", "WebApprover"]

#: The addresses the page may listen on.
LOOPBACK_HOSTS: Final = ("127.0.0.1", "::1", "localhost")

_MAX_BODY: Final = 16 * 1024
_DECIDED_KEPT: Final = 1024
_HEADERS: Final = [
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
]
_STATUS: Final = {200: "200 OK", 403: "403 Forbidden", 404: "404 Not Found",
                  405: "405 Method Not Allowed", 409: "409 Conflict",
                  413: "413 Content Too Large", 415: "415 Unsupported Media Type"}

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass
class _Pending:
    call: HeldCall
    since: float
    decided: threading.Event = field(default_factory=threading.Event)
    approved: bool = False


class WebApprover(ApproverBase):
    """Serves the approval page on ``host:port`` (port 0 picks a free one) from ``start()``.

    ``announce`` receives the one line telling the user where the page is (it holds the
    secret URL); by default it goes to this process's stderr.
    """

    label = "by the web approver"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 announce: Callable[[str], object] | None = None) -> None:
        if host not in LOOPBACK_HOSTS:
            raise ValueError(f"the web approver listens on loopback only "
                             f"({', '.join(LOOPBACK_HOSTS)}), not {host!r}: the calling "
                             f"agent must not reach it")
        self._host = "127.0.0.1" if host == "localhost" else host
        self._port = port
        self._announce = announce if announce is not None else _to_stderr
        self._token = secrets.token_urlsafe(32)
        self._csrf_key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._decided: OrderedDict[str, str] = OrderedDict()   # ticket -> "approved"/...
        self._server: WsgiServer | None = None
        self._closed = False

    def __repr__(self) -> str:
        where = f"port {self._server.port}" if self._server is not None else "not started"
        return f"<WebApprover {where}>"

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            return
        server = WsgiServer(self._app, self._host, self._port, max_connections=8,
                            header_timeout=10.0, body_timeout=10.0, max_body_bytes=_MAX_BODY,
                            name="gateway-approval-web")
        server.start()
        self._server = server
        self._announce(f"mcpsync gateway: approve or reject held tool calls at {self.url} "
                       f"(a secret address of this run: do not share it)")

    @property
    def url(self) -> str:
        """The page's address, secret token included (a secret of this run)."""
        if self._server is None:
            raise RuntimeError("the web approver is not started")
        return f"{self._server.url}/{self._token}/"

    @property
    def port(self) -> int:
        """The port the page listens on (0 before ``start()``, when built with port 0)."""
        return self._server.port if self._server is not None else self._port

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pending = list(self._pending.values())
            self._pending.clear()
        for each in pending:
            each.decided.set()
        if self._server is not None:
            self._server.close(drain=1.0)

    # --- the approver -----------------------------------------------------------------------

    def __call__(self, call: HeldCall, /) -> bool | Verdict:
        pending = _Pending(call, time.monotonic())
        with self._lock:
            if self._closed:
                return Verdict(False, "the web approver is closed", "")
            self._pending[call.ticket] = pending
        pending.decided.wait()
        return pending.approved

    def withdraw(self, call: HeldCall) -> None:
        with self._lock:
            pending = self._pending.pop(call.ticket, None)
            if pending is not None:
                self._remember(call.ticket, "refused: no decision in time")
        if pending is not None:
            pending.decided.set()

    def _remember(self, ticket: str, outcome: str) -> None:
        self._decided[ticket] = outcome
        while len(self._decided) > _DECIDED_KEPT:
            self._decided.popitem(last=False)

    def _csrf(self, ticket: str) -> str:
        return hmac.new(self._csrf_key, b"decide:" + ticket.encode("utf-8"),
                        hashlib.sha256).hexdigest()

    # --- the WSGI application -----------------------------------------------------------------

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        status, body, kind = self._handle(environ)
        headers = [("Content-Type", f"{kind}; charset=utf-8"),
                   ("Content-Length", str(len(body))), *_HEADERS]
        start_response(_STATUS[status], headers)
        return [body]

    def _handle(self, environ: dict[str, Any]) -> tuple[int, bytes, str]:
        port = self.port
        allowed = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        if environ.get("HTTP_HOST", "") not in allowed:
            return _text(403, "this page answers only on its loopback address (the request's "
                              "Host header names another)")
        path = environ.get("PATH_INFO", "")
        parts = path.split("/")
        # "/TOKEN/" -> ["", TOKEN, ""];  "/TOKEN/decide" -> ["", TOKEN, "decide"]
        given = parts[1] if len(parts) > 2 else ""
        if not hmac.compare_digest(given.encode("utf-8", "replace"),
                                   self._token.encode("ascii")):
            return _text(403, "this page needs the secret address the gateway printed when it "
                              "started")
        rest = "/".join(parts[2:])
        method = environ.get("REQUEST_METHOD", "GET")
        if rest == "":
            if method not in ("GET", "HEAD"):
                return _text(405, "the list of held calls is read with GET")
            return 200, self._page().encode("utf-8"), "text/html"
        if rest == "held.json":
            if method not in ("GET", "HEAD"):
                return _text(405, "the list of held calls is read with GET")
            return 200, self._listing().encode("utf-8"), "application/json"
        if rest == "decide":
            if method != "POST":
                return _text(405, "a decision is sent with POST from the page's form")
            return self._decide(environ)
        return _text(404, "no such page; the list of held calls is at the address the "
                          "gateway printed")

    def _same_origin(self, environ: dict[str, Any]) -> bool:
        port = self.port
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and origin not in (f"http://127.0.0.1:{port}",
                                                 f"http://localhost:{port}",
                                                 f"http://[::1]:{port}"):
            return False
        site = environ.get("HTTP_SEC_FETCH_SITE")
        return site is None or site in ("same-origin", "none")

    def _decide(self, environ: dict[str, Any]) -> tuple[int, bytes, str]:
        if not self._same_origin(environ):
            return _text(403, "a decision must come from the approval page itself")
        kind = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return _text(415, "a decision is a form post (application/x-www-form-urlencoded)")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_BODY:
            return _text(413, "the form is too large")
        form = parse_qs(environ["wsgi.input"].read(length).decode("utf-8", "replace"),
                        keep_blank_values=True)

        def one(name: str) -> str:
            values = form.get(name, [])
            return values[0] if len(values) == 1 else ""

        ticket, digest, decision, csrf = (one("ticket"), one("digest"), one("decision"),
                                          one("csrf"))
        if not ticket or not hmac.compare_digest(csrf.encode("utf-8", "replace"),
                                                 self._csrf(ticket).encode("ascii")):
            return _text(403, "the form's CSRF token is missing or wrong; reload the page "
                              "and decide from there")
        if decision not in ("approve", "reject"):
            return _text(409, "the decision must be approve or reject")
        with self._lock:
            pending = self._pending.get(ticket)
            if pending is None:
                before = self._decided.get(ticket)
                if before is not None:
                    return _text(409, f"this held call was already decided ({before}); "
                                      f"nothing changed")
                return _text(409, "no such call is held (it may have timed out); nothing "
                                  "changed")
            if not hmac.compare_digest(digest.encode("utf-8", "replace"),
                                       pending.call.digest.encode("ascii")):
                return _text(409, "that digest is not the held call's (its arguments "
                                  "differ); nothing changed")
            del self._pending[ticket]
            pending.approved = decision == "approve"
            outcome = "approved" if pending.approved else "rejected"
            self._remember(ticket, outcome)
        pending.decided.set()
        call = pending.call
        return 200, _document(
            f"{outcome}: {call.upstream}/{call.tool}",
            f"<p>{html.escape(outcome.capitalize())}: <code>{html.escape(call.upstream)}/"
            f"{html.escape(call.tool)}</code>, digest <code>{call.digest}</code>.</p>"
            f'<p><a href="./">Back to the held calls</a></p>', refresh=False,
        ).encode("utf-8"), "text/html"

    # --- rendering ----------------------------------------------------------------------------

    def _snapshot(self) -> list[_Pending]:
        with self._lock:
            return list(self._pending.values())

    def _listing(self) -> str:
        now = time.monotonic()
        return json.dumps({"held": [
            {"upstream": p.call.upstream, "tool": p.call.tool, "caller": p.call.caller,
             "arguments": redacted_arguments(p.call), "digest": p.call.digest,
             "ticket": p.call.ticket, "waiting_seconds": round(now - p.since, 1),
             "csrf": self._csrf(p.call.ticket)} for p in self._snapshot()]},
            ensure_ascii=False)

    def _page(self) -> str:
        now = time.monotonic()
        rows = []
        for p in self._snapshot():
            call = p.call
            arguments = json.dumps(redacted_arguments(call), ensure_ascii=False,
                                   sort_keys=True, indent=2)
            rows.append(
                f'<section><h2><code>{html.escape(call.upstream)}</code> / '
                f'<code>{html.escape(call.tool)}</code></h2>'
                f"<p>caller {html.escape(call.caller)}, waiting {now - p.since:.0f} s</p>"
                f"<pre>{html.escape(arguments)}</pre>"
                f"<p>digest <code>{call.digest}</code></p>"
                f'<form method="post" action="decide">'
                f'<input type="hidden" name="ticket" value="{html.escape(call.ticket)}">'
                f'<input type="hidden" name="digest" value="{call.digest}">'
                f'<input type="hidden" name="csrf" value="{self._csrf(call.ticket)}">'
                f'<button name="decision" value="approve">Approve</button> '
                f'<button name="decision" value="reject">Reject</button>'
                f"</form></section>")
        body = "".join(rows) or "<p>No call is waiting for approval.</p>"
        return _document("held tool calls", body, refresh=True)


def _document(title: str, body: str, *, refresh: bool) -> str:
    meta = '<meta http-equiv="refresh" content="5">' if refresh else ""
    return (f'<!doctype html><html><head><meta charset="utf-8">{meta}'
            f"<title>mcpsync gateway: {html.escape(title)}</title>"
            f"<style>body{{font-family:sans-serif;max-width:50em;margin:2em auto}}"
            f"pre{{background:#f4f4f4;padding:.5em}}section{{border-top:1px solid #ccc}}"
            f"</style></head><body><h1>mcpsync gateway: {html.escape(title)}</h1>"
            f"{body}</body></html>")


def _text(status: int, message: str) -> tuple[int, bytes, str]:
    return status, (message + "\n").encode("utf-8"), "text/plain"


def _to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
