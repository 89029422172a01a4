"""mcpsync and mcpauth judge URLs the same way.

mcpauth never imports mcpsync, so the character screen and the connection origin exist
twice (``mcpsync/_urls.py`` with ``mcpsync/_origin.py``, and ``mcpauth/_urls.py``).
This test holds the two copies to one verdict on every hostile and ordinary form the two
hostile-URL tables use, plus a few ordinary ones.
"""

from __future__ import annotations

import pytest
from auth.test_hostile_urls import HOSTILE as AUTH_FORMS

from mcpauth import _urls as auth_urls
from mcpsync import _origin as client_urls

from .test_hostile_urls import HOSTILE, SAME_ORIGIN, UNSENDABLE

ORDINARY = [
    "https://mcp.example/mcp",
    "HTTPS://MCP.example:443/x?y=1#f",
    "http://[::1]:8000/mcp",
    "http://127.0.0.1/a/@b",
    "https://b\u00fccher.example/",
    "ftp://example.com/",
    "not a url",
    "",
]


def _fill(form: str) -> str:
    return form.replace("{PA}", "8000").replace("{PB}", "8001")


@pytest.mark.parametrize("form", sorted(set(HOSTILE + UNSENDABLE + SAME_ORIGIN + AUTH_FORMS
                                            + ORDINARY)))
def test_both_copies_give_one_verdict(form: str) -> None:
    url = _fill(form)
    verdicts = []
    for module in (client_urls, auth_urls):
        try:
            module.refuse_hostile(url)
            verdict: object = module.connection_origin(url)
        except ValueError as exc:  # each module's UnsafeURL
            verdict = ("refused", str(exc))
        verdicts.append(verdict)
    client, auth = verdicts
    if isinstance(client, tuple) and client[:1] == ("refused",):
        assert client == auth
    else:
        assert tuple(client) == tuple(auth)  # type: ignore[arg-type]
