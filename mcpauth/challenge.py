"""The ``WWW-Authenticate`` parser (RFC 9110 §11.6.1, RFC 6750 §3), written by hand.

authlib has no client-side challenge parser, and the ones in other libraries either split on
commas inside quoted strings or match parameter names by substring (``error_scope`` read as
``scope``). This one follows the grammar::

    WWW-Authenticate = #challenge
    challenge        = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
    auth-param       = token BWS "=" BWS ( token / quoted-string )

A comma followed by ``token`` and then anything but ``=`` begins a new challenge; commas
inside quoted strings separate nothing; empty list elements are skipped; a token68 is
recognised only as the whole rest of a challenge.

Breakage seen in the wild is tolerated rather than rejected: a duplicate parameter keeps its
first value (later ones are logged at DEBUG), spaces around ``=`` are allowed, single-quoted
values are read as quoted (without escapes), an unterminated quote runs to the end of the
value, an unquoted value runs to the next comma or space (so an unquoted URL survives), and a
missing comma between two parameters is forgiven. The parser never raises on server input:
a list element it cannot make sense of is skipped and the rest survive.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["Challenge", "parse_challenges", "select_challenge"]

_log = logging.getLogger("mcpauth.challenge")

_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789"
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WS = " \t"
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


@dataclass(frozen=True)
class Challenge:
    """One challenge: ``scheme`` and parameter names lower-cased, values as sent."""

    scheme: str
    params: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    token68: str | None = None

    def param(self, name: str) -> str | None:
        """The value of parameter ``name`` (any case), or None; exact names only."""
        return self.params.get(name.lower())

    @property
    def resource_metadata(self) -> str | None:
        """The RFC 9728 protected-resource metadata URL, when the server named one."""
        return self.param("resource_metadata")

    @property
    def scopes(self) -> list[str]:
        """``scope`` split on whitespace; ``[]`` when absent."""
        return (self.param("scope") or "").split()

    @property
    def error(self) -> str | None:
        """The RFC 6750 error code (``invalid_token``, ``insufficient_scope``, ...)."""
        return self.param("error")

    @property
    def error_description(self) -> str | None:
        """The server's human-readable explanation, when given."""
        return self.param("error_description")

    @property
    def error_uri(self) -> str | None:
        """The server's link to an explanation, when given."""
        return self.param("error_uri")

    @property
    def algs(self) -> list[str]:
        """The RFC 9449 ``algs`` of a DPoP challenge, split on whitespace."""
        return (self.param("algs") or "").split()


class _Scanner:
    """A cursor over one header value; every method stops at the end without raising."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def end(self) -> bool:
        return self.i >= len(self.s)

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WS:
            self.i += 1

    def token(self) -> str:
        start = self.i
        while self.i < len(self.s) and self.s[self.i] in _TCHAR:
            self.i += 1
        return self.s[start:self.i]

    def skip_element(self) -> None:
        """Skip to the next comma that is not inside a quoted string (or to the end)."""
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == ",":
                return
            if ch in "\"'":
                self.i += 1
                self._quoted(ch)
                continue
            self.i += 1

    def _quoted(self, quote: str) -> str:
        """Read a quoted string whose opening quote was consumed; ``\\x`` is ``x`` inside
        double quotes only; an unterminated string runs to the end."""
        out: list[str] = []
        while self.i < len(self.s):
            ch = self.s[self.i]
            self.i += 1
            if ch == quote:
                return "".join(out)
            if ch == "\\" and quote == '"' and self.i < len(self.s):
                out.append(self.s[self.i])
                self.i += 1
                continue
            out.append(ch)
        return "".join(out)

    def value(self) -> str:
        ch = self.peek()
        if ch in ("\"", "'") and ch:
            self.i += 1
            return self._quoted(ch)
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in _WS and self.s[self.i] != ",":
            self.i += 1
        return self.s[start:self.i]

    def param_follows(self) -> bool:
        """True when the cursor sits on ``token BWS "="`` (an auth-param, not a scheme)."""
        save = self.i
        name = self.token()
        self.skip_ws()
        result = bool(name) and self.peek() == "="
        self.i = save
        return result

    def scheme_follows(self) -> bool:
        """True when the cursor sits on a token followed by whitespace, a comma or the end:
        the start of a new challenge (``token SP``), not a parameter or garbage."""
        save = self.i
        name = self.token()
        nxt = self.peek()
        result = bool(name) and (nxt == "" or nxt == "," or nxt in _WS)
        if result and nxt in _WS:
            self.skip_ws()
            result = self.peek() != "="
        self.i = save
        return result

    def token68_rest(self) -> str | None:
        """A token68 that is the whole rest of the challenge (up to a comma or the end)."""
        m = _TOKEN68.match(self.s, self.i)
        if m is None:
            return None
        j = m.end()
        while j < len(self.s) and self.s[j] in _WS:
            j += 1
        if j < len(self.s) and self.s[j] != ",":
            return None
        self.i = j
        return m.group(0)


def _parse_params(sc: _Scanner, scheme: str) -> dict[str, str]:
    """Read ``#auth-param`` until a comma that starts a new challenge, or the end."""
    params: dict[str, str] = {}
    while True:
        sc.skip_ws()
        if sc.end():
            return params
        if sc.peek() == ",":
            sc.i += 1
            while sc.peek() in (",", " ", "\t") and not sc.end():
                sc.i += 1
            if sc.end() or sc.scheme_follows():
                return params  # a new challenge (or the end) starts here
            continue  # a parameter, or garbage dropped below
        if not sc.param_follows():
            sc.skip_element()  # garbage inside the challenge: drop this element only
            continue
        name = sc.token().lower()
        sc.skip_ws()
        sc.i += 1  # the "="
        sc.skip_ws()
        value = sc.value()
        if name in params:
            _log.debug("WWW-Authenticate %s: duplicate parameter %r ignored", scheme, name)
        else:
            params[name] = value


def _parse_value(text: str) -> list[Challenge]:
    sc = _Scanner(text)
    found: list[Challenge] = []
    while True:
        while not sc.end() and sc.peek() in (",", " ", "\t"):
            sc.i += 1
        if sc.end():
            return found
        scheme = sc.token()
        nxt = sc.peek()
        if not scheme or (nxt and nxt not in _WS and nxt != ","):
            sc.skip_element()  # not a challenge: skip it, keep the others
            continue
        sc.skip_ws()
        if sc.end() or sc.peek() == ",":
            found.append(Challenge(scheme.lower()))
            continue
        token68 = sc.token68_rest()
        if token68 is not None:
            found.append(Challenge(scheme.lower(), token68=token68))
            continue
        params = _parse_params(sc, scheme.lower())
        found.append(Challenge(scheme.lower(), MappingProxyType(params)))


def parse_challenges(values: Iterable[str]) -> list[Challenge]:
    """Every challenge of every ``WWW-Authenticate`` value, in order; never raises."""
    found: list[Challenge] = []
    for value in values:
        if not isinstance(value, str):
            continue
        try:
            found.extend(_parse_value(value))
        except Exception:  # pragma: no cover - the scanner is written not to raise
            _log.debug("unparseable WWW-Authenticate value skipped", exc_info=True)
    return found


def select_challenge(challenges: Sequence[Challenge], *, dpop: bool) -> Challenge | None:
    """The challenge mcpauth acts on: ``DPoP`` when DPoP applies (or when it is the only
    one we understand), else ``Bearer``; other schemes are ignored."""
    first_dpop = next((c for c in challenges if c.scheme == "dpop"), None)
    first_bearer = next((c for c in challenges if c.scheme == "bearer"), None)
    if dpop and first_dpop is not None:
        return first_dpop
    return first_bearer if first_bearer is not None else first_dpop
