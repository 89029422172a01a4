"""Redaction at full detail: a whole OAuth exchange crosses the inspector and no credential
reaches the file, while the values that carry no secret are still there to read."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import pickle
import random
import secrets
import string
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcpsync.gateway._inspector import Inspector
from mcpsync.gateway._redact import REDACTED, Redactor, _entropy


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt() -> str:
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64(json.dumps({"sub": "ada", "aud": "https://mcp.example.com",
                              "scope": "tools:call", "exp": 2_000_000_000}).encode())
    signature = hmac.new(secrets.token_bytes(32), f"{header}.{claims}".encode(),
                         hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64(signature)}"


def _oauth_exchange(token_urlsafe: Callable[[int], str] = secrets.token_urlsafe
                    ) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The messages of an OAuth-protected upstream's session, and the secrets in them
    (``token_urlsafe`` makes the refresh token, the code, the verifier and the client's
    secret)."""
    access, refresh, code = _jwt(), token_urlsafe(32), token_urlsafe(24)
    verifier, client_secret = token_urlsafe(48), token_urlsafe(32)
    password, api_key = "correct horse battery staple", "sk-" + secrets.token_urlsafe(30)
    github, aws = "ghp_" + secrets.token_hex(18), "AKIA" + secrets.token_hex(8).upper()
    cookie = secrets.token_hex(16)
    secret_list = [access, refresh, code, verifier, client_secret, password, api_key, github,
                   aws, cookie]
    redirect = (f"http://127.0.0.1:8765/callback?code={code}&state=af0ifjsldkj"
                f"&iss=https%3A%2F%2Fauth.example.com")
    messages: list[tuple[str, dict[str, Any]]] = [
        ("host->gateway", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "auth__login", "arguments": {
                "redirect_uri": redirect,
                "headers": {"Authorization": f"Bearer {access}", "Cookie": f"sid={cookie}",
                            "Accept": "application/json"},
                "form": f"grant_type=authorization_code&code={code}&code_verifier={verifier}"
                        f"&client_id=mcpsync-demo&client_secret={client_secret}",
                "user": {"name": "ada", "Password": password},
            }}}),
        ("gateway->upstream", {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "login", "arguments": {"config": {"nested": [{"apiKey": api_key},
                                                                  {"env": f"GH={github}"}]}},
            "_meta": {"progressToken": 42}}}),
        ("upstream->gateway", {"jsonrpc": "2.0", "id": 7, "result": {
            "content": [{"type": "text", "text": json.dumps({
                "access_token": access, "token_type": "Bearer", "expires_in": 3600,
                "refresh_token": refresh, "scope": "tools:call"})},
                        {"type": "text", "text": f"export AWS_ACCESS_KEY_ID={aws}"},
                        {"type": "resource_link", "uri": f"https://api.example.com/me?"
                                                          f"access_token={access}&fields=name",
                         "name": "profile"}],
            "structuredContent": {"session": {"tokens": {"access": access,
                                                         "refresh": refresh}}}}}),
        ("gateway->host", {"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32603, "message": f"upstream said: invalid_grant for code {code} "
                                       f"(Authorization: Bearer {access})",
            "data": {"client_secret": client_secret, "url": redirect}}}),
    ]
    return messages, secret_list


def _pieces(secret: str) -> list[str]:
    """The secret and long pieces of it (a partial leak is a leak)."""
    if len(secret) < 24:
        return [secret]
    return [secret, secret[:16], secret[-16:], secret[len(secret) // 2 - 8:][:16]]


# The base64url alphabet without digits: a random token that happens to hold no digit (2.4%
# of 22-character ones, 0.4% of 32-character ones) is a uniform draw from it.
_DIGITLESS = string.ascii_letters + "-_"


def _digitless_token_urlsafe(seed: int) -> Callable[[int], str]:
    """``secrets.token_urlsafe`` as it comes out when the token holds no digit: the length
    it would give, from a seeded generator (the hard case of the random-word guess, made
    every time instead of 1% of the time)."""
    rng = random.Random(seed)
    return lambda nbytes: "".join(rng.choices(_DIGITLESS, k=len(secrets.token_urlsafe(nbytes))))


@pytest.mark.parametrize("tokens", ["random", "digitless"])
@pytest.mark.parametrize("as_bytes", [True, False], ids=["raw-bytes", "decoded"])
def test_no_credential_of_an_oauth_exchange_reaches_a_full_detail_log(
        tmp_path: Path, as_bytes: bool, tokens: str) -> None:
    """Random secrets, and (``digitless``) the same exchange with tokens that hold no digit,
    which the random-word guess once let through: the refresh token under ``"refresh"`` and
    the code in an error message are under no secret name."""
    messages, secret_list = _oauth_exchange(
        secrets.token_urlsafe if tokens == "random" else _digitless_token_urlsafe(7))
    log = tmp_path / "g.log"
    with Inspector(log, detail="full") as inspector:
        for direction, message in messages:
            inspector.record(direction, json.dumps(message).encode() if as_bytes else message,
                             upstream="auth", size=len(json.dumps(message)))
    text = log.read_text()
    for secret in secret_list:
        for piece in _pieces(secret):
            assert piece not in text, f"{piece!r} of a secret is in the log"
            # also not in an escaped form (JSON text inside a JSON string)
            assert json.dumps(piece)[1:-1] not in text
    assert text.count(REDACTED) >= len(secret_list)
    # What is not secret stays readable: the redaction is aimed, not a blanket.
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 4
    login = records[0]["payload"]["params"]["arguments"]
    assert login["headers"]["Accept"] == "application/json"
    assert login["user"]["name"] == "ada"
    assert "state=af0ifjsldkj" in login["redirect_uri"]
    assert "client_id=mcpsync-demo" in login["form"]
    assert records[1]["payload"]["params"]["_meta"] == {"progressToken": 42}
    answer = records[2]["payload"]["result"]["content"]
    assert '"token_type": "Bearer"' in answer[0]["text"]
    assert '"expires_in": 3600' in answer[0]["text"]
    assert "fields=name" in answer[2]["uri"]
    assert records[3]["code"] == -32603 and "invalid_grant" in records[3]["message"]


def test_the_summary_detail_names_nothing_secret_either(tmp_path: Path) -> None:
    messages, secret_list = _oauth_exchange()
    log = tmp_path / "g.log"
    with Inspector(log) as inspector:
        for direction, message in messages:
            inspector.record(direction, message, upstream="auth")
    text = log.read_text()
    assert not [s for s in secret_list if any(p in text for p in _pieces(s))]


def test_the_rules_are_configurable() -> None:
    custom = Redactor(extra_keys=["Employee-Number"], extra_patterns=[r"\bEMP-\d{4}\b"])
    assert custom.value({"employee_number": 1234, "note": "ask EMP-0042"}) == \
        {"employee_number": REDACTED, "note": f"ask {REDACTED}"}
    digest = hashlib.sha256(b"x").hexdigest()
    assert Redactor().text(digest) == REDACTED
    assert Redactor(entropy=False).text(digest) == digest
    off = Redactor(enabled=False)
    assert off.value({"password": "hunter2"}) == {"password": "hunter2"}
    with pytest.raises(ValueError, match="not a valid regular expression"):
        Redactor(extra_patterns=["(unclosed"])


@pytest.mark.parametrize(("text", "expected"), [
    ("Basic usage: pass a path", "Basic usage: pass a path"),
    ("/tmp/pytest-of-user/pytest-12/test0", "/tmp/pytest-of-user/pytest-12/test0"),
    ("notifications/resources/list_changed", "notifications/resources/list_changed"),
    ("max_tokens=1024", "max_tokens=1024"),
    ("https://u:hunter2@db.example.com/x", f"https://u:{REDACTED}@db.example.com/x"),
    ("Api-Key: abc", f"Api-Key: {REDACTED}"),
    ("authorization=Basic dXNlcjpwYXNz", f"authorization={REDACTED}"),
    ("xoxb-1234567890-abcdefghij", REDACTED),
])
def test_what_text_is_kept_and_what_is_replaced(text: str, expected: str) -> None:
    assert Redactor().text(text) == expected


# Names that read like words stay, whatever their case pattern (the guess must not blank out
# a tool's result full of identifiers, file names and paths).
_READABLE = [
    "aVeryLongVariableNameForTheUserProfile", "HTTPServerRequestHandlerFactory",
    "XMLHttpRequestUpload", "my_long_function_name_here", "MY_LONG_CONSTANT_NAME_HERE",
    "InternationalizationOfTheUserInterface", "ThreadPoolExecutorWorkerContext",
    "test_no_credential_of_an_oauth_exchange_reaches_a_full_detail_log",
    "mcpsync-gateway-inspector-helper", "getElementsByTagNameNS", "DefaultEventLoopPolicy",
    "SimpleXMLRPCRequestHandler", "ContentSecurityPolicyReportOnly", "PyObject_GetAttrString",
    "src/mcpsync/gateway/InspectorHelperProcess.py", "https://example.com/docs/GettingStarted",
]


@pytest.mark.parametrize("text", _READABLE)
def test_names_that_read_like_words_are_kept(text: str) -> None:
    assert Redactor().text(text) == text


@pytest.mark.parametrize("length", [20, 22, 24, 32, 43, 64])
def test_digitless_random_tokens_are_redacted(length: int) -> None:
    """Random base64url tokens without a digit, which the guess once required: 1000 of each
    length from a fixed seed, all caught (a regression fails every time, not 1% of the
    time). The guess misses 1 to 4 in 20,000 such tokens of 20 to 28 characters (see
    ``benchmarks/redact_random_words.py``), so another seed may hold one."""
    rng = random.Random(0)
    rules = Redactor()
    missed = [token for token in ("".join(rng.choices(_DIGITLESS, k=length))
                                  for _ in range(1000))
              if token in rules.text(f'{{"refresh": "{token}", "note": "code {token}"}}')]
    assert missed == []


@pytest.mark.parametrize("token", [
    # digits, both cases, but under 3.6 bits of entropy (about 1 in 1,800 at 22 characters)
    "EyAxFQz1AEAnmAQ8Kk5kAA", "w5qesNq3PeOhBN5VweqwCw", "gQgf8LDx9ZQLkZBcLDW89Q",
])
def test_random_tokens_with_a_digit_and_little_entropy_are_redacted(token: str) -> None:
    assert _entropy(token) < 3.6
    assert Redactor().text(f"code {token}.") == f"code {REDACTED}."


def test_hex_keys_with_little_entropy_are_redacted() -> None:
    """A random 32-digit hex key has under 3.3 bits of entropy per digit 1.7% of the time,
    which the guess once required."""
    rng = random.Random(3)
    low = [key for key in (rng.randbytes(16).hex() for _ in range(3000)) if _entropy(key) < 3.3]
    assert len(low) > 20
    rules = Redactor()
    assert [key for key in low if key in rules.text(f"session {key}")] == []


@pytest.mark.parametrize("length", [16, 22, 32, 43])
def test_a_digitless_bearer_credential_is_redacted_by_its_scheme(length: int) -> None:
    """The scheme pattern wants a digit, a token symbol or a lower-then-upper case change,
    or letters only that do not read like English; a random token has one of these almost
    surely (measured: about 1 in 20,000 of 16 characters missed, none of 22 or more), and
    here the random-word guess is off, so the pattern alone decides."""
    rng = random.Random(length)
    rules = Redactor(entropy=False)
    tokens = ["".join(rng.choices(_DIGITLESS, k=length)) for _ in range(300)]
    assert [t for t in tokens if t in rules.text(f"retry with Bearer {t} now")] == []


def test_the_redactor_repr_holds_no_rule_text() -> None:
    assert "EMP" not in repr(Redactor(extra_patterns=[r"EMP-\d+"]))


# Shapes that made the patterns backtrack over a whole run from every position in it (a
# 200 KB value took minutes): a long run of name characters, dashes making word boundaries
# inside a base64url run, scheme-like prefixes. Each is 200 KB; linear work is a few
# hundredths of a second, so the timeout only catches the quadratic kind.
_HOSTILE = {
    "one letter": "a" * 200_000,
    "a name without its '='": "x" * 200_000 + "=1",
    "no '://' after a scheme": "http" * 50_000,
    "JWT heads split by dashes": "eyJa-" * 40_000,
    "base64": base64.b64encode(bytes(range(256)) * 600).decode(),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("shape", sorted(_HOSTILE))
def test_redaction_of_a_long_value_is_not_quadratic(shape: str) -> None:
    text = _HOSTILE[shape]
    out = Redactor().text(text)
    assert len(out) <= len(text) + len(REDACTED)


class _AlwaysOn(Redactor):
    """Rules that cannot be switched off: a subclass with an ``enabled`` of its own."""

    @property  # type: ignore[override]
    def enabled(self) -> bool:
        return True

    @enabled.setter
    def enabled(self, value: bool) -> None:
        pass


def test_a_subclass_with_its_own_enabled_is_consulted() -> None:
    """Redaction asks ``enabled`` (and ``entropy``) through the attribute, so a subclass
    that makes it a property of its own decides, as it did before these were watched."""
    rules = _AlwaysOn(enabled=False)
    assert rules.enabled is True
    assert rules.text("token=ghp_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gH3jK5") == f"token={REDACTED}"
    assert rules.value({"password": "hunter2"}) == {"password": REDACTED}


def test_rules_pickled_with_plain_attributes_still_load() -> None:
    """A Redactor pickled when ``enabled``/``entropy`` were plain attributes (its state
    holds them by those names) loads, redacts and can be changed."""
    rules = Redactor(extra_keys=["myfield"], entropy=False)
    state = dict(vars(rules))
    state["enabled"] = state.pop("_enabled")
    state["entropy"] = state.pop("_entropy")
    del state["_changes"]
    old: Redactor = Redactor.__new__(Redactor)
    old.__setstate__(state)
    loaded = pickle.loads(pickle.dumps(old))
    for each in (old, loaded):
        assert each.enabled is True and each.entropy is False and each.changes == 0
        assert each.value({"myfield": "x", "a": "b"}) == {"myfield": REDACTED, "a": "b"}
        each.enabled = False
        assert each.changes == 1 and each.value({"myfield": "x"}) == {"myfield": "x"}


def test_setting_the_same_value_is_no_change() -> None:
    """Only a real change counts (a change drops what waiting requests were about)."""
    rules = Redactor()
    assert rules.changes == 0
    rules.enabled = True
    rules.entropy = True
    assert rules.changes == 0
    rules.enabled = False
    rules.enabled = False
    assert rules.changes == 1


def test_a_long_mixed_case_run_is_judged_in_bounded_memory() -> None:
    """A frame may hold one run of megabytes (an upstream's blob): judging whether it reads
    like words must not hold a list of its pieces (two megabytes of alternating case split
    into a million pieces, over 60 MB as a list), only a window's worth."""
    run = "aA" * 1_000_000
    tracemalloc.start()
    try:
        redacted = Redactor().text(run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert redacted == "[redacted]"
    assert peak < 4 * len(run)   # the text's own copies, not a list of pieces
