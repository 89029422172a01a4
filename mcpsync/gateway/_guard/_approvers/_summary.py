"""What an approver shows about a held call: the same facts everywhere, arguments redacted.

A person deciding on a call needs the upstream, the tool, the arguments and the digest the
approval will cover; they do not need the secrets an argument may carry, and a terminal's
scrollback, a browser's history or a hook's log would keep them. So the arguments go
through the traffic log's default redaction rules before any approver shows them.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from mcpsync.gateway._guard._approval import HeldCall
from mcpsync.gateway._redact import Redactor

__all__ = ["redacted_arguments", "summary", "summary_lines"]

_REDACTOR: Final = Redactor()

#: Characters of one string value shown; a person cannot read more, and redacting megabytes
#: would hold up the question.
_SHOWN: Final = 1000
# the token-like tail a cut may leave: dropped, so no secret is shown half-redacted
_TAIL: Final = re.compile(r"[A-Za-z0-9_\-+/=.~:@]*$")


def _shorten(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) <= _SHOWN:
            return value
        head = _TAIL.sub("", value[:_SHOWN])
        return f"{head}... ({len(value)} characters in all)"
    if isinstance(value, dict):
        return {key: _shorten(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shorten(item) for item in value]
    return value


def redacted_arguments(call: HeldCall) -> Any:
    """The call's arguments with secrets replaced and long strings cut (the digest covers
    them whole)."""
    return _REDACTOR.value(_shorten(dict(call.arguments)))


def summary(call: HeldCall, rule: str = "") -> dict[str, Any]:
    """The held call as a JSON object (what the command hook reads on stdin)."""
    out: dict[str, Any] = {
        "upstream": call.upstream,
        "tool": call.tool,
        "arguments": redacted_arguments(call),
        "digest": call.digest,
        "ticket": call.ticket,
        "caller": call.caller,
    }
    if rule:
        out["rule"] = rule
    return out


def summary_lines(call: HeldCall) -> list[str]:
    """The held call as lines of text (what the terminal shows)."""
    arguments = json.dumps(redacted_arguments(call), ensure_ascii=False, sort_keys=True,
                           indent=2)
    return [
        f"upstream:  {call.upstream}",
        f"tool:      {call.tool}",
        f"caller:    {call.caller}",
        "arguments: " + arguments.replace("\n", "\n           "),
        f"digest:    {call.digest}",
    ]
