"""A stand-in web browser for ``mcpsync login`` tests, started through ``$BROWSER``.

Why a script rather than a mock: the CLI runs as a real subprocess, and Python's
``webbrowser`` module is what mcpauth uses to open the authorization page. With ``$BROWSER``
set to ``"<python> fake_browser.py %s"`` (a command line: it contains ``%s``, so
``webbrowser`` splits it with ``shlex`` and puts the URL in place of ``%s``), ``webbrowser.open``
runs this script and waits for it; exit status 0 means "the browser opened".

What it does, like a person whose authorization server approves at once:

1. GET the authorization URL, without following the redirect (it must be a 302/303);
2. GET the ``Location`` (the client's loopback ``/callback``) and require a 200;
3. exit 0. Any other answer exits 1 with one line on stderr.

It writes nothing to stdout: the browser inherits the CLI's stdout, which the tests check.
``http.client`` rather than ``urllib``: no proxy settings from the environment, no redirects.

``--forbidden MARKER``: a browser that must never be started. It writes ``MARKER`` (so the
test can see it was started) and exits 1 without touching the URL.
"""

from __future__ import annotations

import http.client
import sys
from urllib.parse import urlsplit

_TIMEOUT = 10.0


def _get(url: str) -> tuple[int, str | None]:
    """GET ``url`` (http only: every peer is on loopback); the status and ``Location``."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http URL: {url[:60]!r}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=_TIMEOUT)
    try:
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        conn.request("GET", target, headers={"Accept": "text/html"})
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("Location")
    finally:
        conn.close()


def _browse(url: str) -> int:
    status, location = _get(url)
    if status not in (302, 303) or not location:
        print(f"fake_browser: the authorization URL answered {status}, not a redirect",
              file=sys.stderr)
        return 1
    status, _ = _get(location)
    if status != 200:
        print(f"fake_browser: the callback answered {status}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--forbidden":
        with open(argv[1], "a", encoding="utf-8") as marker:
            marker.write("the browser was started\n")
        return 1
    if len(argv) != 1:
        print("usage: fake_browser.py [--forbidden MARKER] URL", file=sys.stderr)
        return 2
    try:
        return _browse(argv[0])
    except (OSError, ValueError, http.client.HTTPException) as exc:
        print(f"fake_browser: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
