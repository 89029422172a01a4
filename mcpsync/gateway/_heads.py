"""The id (and a request's method) of a usual frame, read from the line's bytes without
parsing it, so the pass-through can forward the line first and check it afterwards.

Between reading a frame and writing it on, the gateway's work is what the caller waits for.
Timed inside the gateway (from a read's wake-up to the write), checking the line is JSON
with the C scanner and entering the call in flight under a lock took about three times as
long as a loop that only forwards (docs/performance.md, "Forwarded first, checked after").
The check still has to happen: it is done after the write. What the write needs first is
only:

- for a line from the host, that it is a call (a request with a number or string id) and not
  one the gateway keeps for a restart (``initialize``); its id is entered after the write;
- for a line from the upstream, that it is an answer, and its id: the call is taken out of
  the in-flight table before the host can see the answer (and reuse the id).

Both sit at the line's ends in the shapes real peers write: ``{"jsonrpc":"2.0","id":7,
"method":"tools/call",...}`` and ``{"jsonrpc":"2.0","id":7,"result":...}`` (this package,
the official Python SDK, the TypeScript SDK's errors), or ``{"method":"tools/call",...,
"jsonrpc":"2.0","id":7}`` and ``{"result":...,"jsonrpc":"2.0","id":7}`` (the TypeScript
SDK). A string id is taken only without escapes (its bytes are then its text). Anything else
returns ``None``, and the caller checks the line before forwarding it, as for every frame
that is not of these shapes.

What is read here is confirmed by the check after the write (the id and method the JSON
parser gives, and that the line is one JSON object); a line that fails it had been forwarded
(docs/gateway.md, "Lines checked after they are forwarded").
"""

from __future__ import annotations

from typing import Final

from mcpsync._envelope import IdKey

__all__ = ["ANSWER_KEYS", "AT", "LONGEST_ID", "METHOD", "START", "answer_head", "call_head"]

START: Final = b'{"jsonrpc":"2.0","id":'
AT: Final = len(START)
METHOD: Final = b',"method":"'
_TAIL: Final = b',"jsonrpc":"2.0","id":'
_ANSWER_STARTS: Final = (b'{"result":', b'{"error":')
ANSWER_KEYS: Final = (b',"result":', b',"error":')
LONGEST_ID: Final = 64   # bytes of an id read here; a longer one is checked first


def _id_at(line: bytes | bytearray, at: int, stop: int) -> IdKey | None:
    """The id whose value is ``line[at:stop]``: a plain JSON integer, or a string without
    escapes."""
    value = line[at:stop]
    if value[:1] == b'"':
        text = value[1:-1]
        if len(value) < 2 or value[-1:] != b'"' or b'"' in text or b"\\" in text:
            return None
        try:
            return ("str", text.decode())
        except UnicodeDecodeError:
            return None
    digits = value[1:] if value[:1] == b"-" else value
    if not digits.isdigit() or (digits[:1] == b"0" and len(digits) > 1):
        return None   # not a JSON integer (a leading zero is not JSON either)
    return ("int", int(value))


def _head_id(line: bytes | bytearray) -> tuple[IdKey, int] | None:
    """The id of ``{"jsonrpc":"2.0","id":7,...`` and the index of the comma after it."""
    if line[AT:AT + 1] == b'"':
        comma = line.find(b'",', AT + 1, AT + 3 + LONGEST_ID) + 1
    else:
        comma = line.find(b",", AT, AT + 1 + LONGEST_ID)
    if comma <= AT:
        return None
    key = _id_at(line, AT, comma)
    return None if key is None else (key, comma)


def _tail_id(line: bytes | bytearray) -> IdKey | None:
    """The id of ``...,"jsonrpc":"2.0","id":7}`` ending the line (before its newline)."""
    at = line.rfind(_TAIL, max(0, len(line) - len(_TAIL) - LONGEST_ID - 4))
    if at < 0:
        return None
    return _id_at(line, at + len(_TAIL), len(line) - 2)


def call_head(line: bytes) -> tuple[IdKey, bytes] | None:
    """``(id key, method)`` of ``line`` (one whole line with its newline, ending ``}\n``)
    when it looks like a call of a usual shape, else None. The method is the raw bytes of a
    string without escapes. The commonest shape (a plain positive integer id first) is read
    in one flat run of byte methods: this is on the path the host waits on."""
    if line.startswith(START):
        comma = line.find(b",", AT, AT + 1 + LONGEST_ID)
        value = line[AT:comma]
        if comma > AT and value.isdigit() and (value[0] != 0x30 or comma == AT + 1):
            if not line.startswith(METHOD, comma):
                return None
            after = comma + len(METHOD)
            close = line.find(b'"', after)
            method = line[after:close]
            if close < 0 or b"\\" in method:
                return None
            return ("int", int(value)), method
    return _other_call_head(line)


def _other_call_head(line: bytes) -> tuple[IdKey, bytes] | None:
    if line.startswith(START):
        found = _head_id(line)
        if found is None or not line.startswith(METHOD, found[1]):
            return None
        key, after = found[0], found[1] + len(METHOD)
    elif line.startswith(b'{"method":"'):
        tail = _tail_id(line)
        if tail is None:
            return None
        key, after = tail, 11
    else:
        return None
    close = line.find(b'"', after)
    method = line[after:close]
    if close < 0 or b"\\" in method:
        return None
    return key, method


def answer_head(line: bytes | bytearray) -> IdKey | None:
    """The id key of ``line`` (one whole line with its newline, ending ``}\n``) when it
    looks like an answer (a result or an error) of a usual shape, else None; the commonest
    shape in one flat run, as in :func:`call_head`."""
    if line.startswith(START):
        comma = line.find(b",", AT, AT + 1 + LONGEST_ID)
        value = line[AT:comma]
        if comma > AT and value.isdigit() and (value[0] != 0x30 or comma == AT + 1):
            return ("int", int(value)) if line.startswith(ANSWER_KEYS, comma) else None
        found = _head_id(line)
        if found is None or not line.startswith(ANSWER_KEYS, found[1]):
            return None
        return found[0]
    if line.startswith(_ANSWER_STARTS):
        return _tail_id(line)
    return None
