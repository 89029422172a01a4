"""Sorting a finished JSON reply to one POSTed request: what to deliver, and what went wrong.

Why: a ``200 application/json`` reply to the POST of request N is complete once its body is
read, so it either answers N or never will. Before this check, a body that was empty, not
JSON, an array, or the response to another id was queued as-is and the call waited for its
whole timeout (forever with ``timeout=math.inf``); worse, a response carrying the id of
*another* pending call was handed to that call (a crossed answer). Here the reply to N
answers N only: responses with any other id are dropped (and named in the error), so no
other waiter ever receives them, and the caller fails N at once with what the server sent.
Notifications and server requests in the body are still delivered: they are legal there.
"""

from __future__ import annotations

from mcpsync.jsonrpc import PARSE_ERROR, Batch, Message, ParseError, RequestId

__all__ = ["sort_json_reply"]


def sort_json_reply(parsed: Message | Batch | ParseError, wire_id: RequestId,
                    body: bytes) -> tuple[list[Message], str]:
    """``(items to deliver, what the server sent)`` for the reply to request ``wire_id``.

    The items include the response to ``wire_id`` when there is one (an id-less error
    response counts: it is how a server reports a request it could not even read); the
    text describes the body for an error message when there is none.
    """
    if isinstance(parsed, ParseError):
        if not body.strip():
            return [], "an empty body"
        if parsed.code == PARSE_ERROR:
            return [], f"a body that is not JSON (it starts {parsed.excerpt[:80]!r})"
        return [], f"a body that is not one JSON-RPC message ({parsed})"
    items = list(parsed) if isinstance(parsed, Batch) else [parsed]
    keep: list[Message] = []
    others: list[str] = []
    invalid: list[str] = []
    for item in items:
        if isinstance(item, ParseError):  # one bad element of a batch
            invalid.append(str(item))
        elif item.method is not None:
            keep.append(item)           # a notification or a server request
        elif item.id is None:
            if item.error is not None:  # an id-less error: the request was refused
                item.id = wire_id
                keep.append(item)
        elif item.id.key == wire_id.key:
            keep.append(item)
        else:
            others.append(item.id.raw)
    if others:
        what = (f"the response to another request (id {', '.join(others)}, not "
                f"{wire_id.raw})")
    elif invalid:
        what = f"a JSON array with an invalid element ({invalid[0]})"
    elif isinstance(parsed, Batch):
        what = "a JSON array without the response to this request"
    elif keep and keep[0].method is not None:
        what = f"a {keep[0].method!r} message instead of the response"
    else:
        what = "a message without the response to this request"
    return keep, what
