"""The sealed ``requestState``: what opens, what is refused and why, and what never leaks.

Every refusal is produced from a real token: sealed, then altered, cut, replayed on another
request or aged with the sealer's clock. The cross-process test runs a second Python process
that shares the key only through ``MCPSYNC_STATE_KEY``, as two workers of one server would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from helpers import DOCS

from mcpsync.server._state import ENV_KEYS, StateRefused, StateSealer, StateTooLarge

KEY = "k-" + "0123456789abcdef" * 2
OLD_KEY = b"old-secret-" + bytes(range(32))
NEW_KEY = "new-secret-fedcba9876543210"
REQUEST: dict[str, Any] = {"method": "tools/call", "target": "book_flight",
                           "arguments": {"from": "AMS", "to": "NRT", "seats": 2}}
PAYLOAD: dict[str, Any] = {"answers": {"confirm": {"action": "accept"}},
                           "note": "Zürich ✈ 東京", "marker": "payload-marker-7f3a", "round": 2,
                           "nested": [1, None, True]}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def raw(token: str) -> bytearray:
    return bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


def encode(data: bytes | bytearray) -> str:
    return base64.urlsafe_b64encode(bytes(data)).rstrip(b"=").decode("ascii")


def refusal(sealer: StateSealer, token: object, **request: Any) -> StateRefused:
    with pytest.raises(StateRefused) as caught:
        sealer.open(token, **{**REQUEST, **request})
    return caught.value


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own MCPSYNC_STATE_KEY must not change what these tests see."""
    monkeypatch.delenv(ENV_KEYS, raising=False)


def test_round_trip_returns_the_payload_alone() -> None:
    sealer = StateSealer("travel", [KEY])
    token = sealer.seal(PAYLOAD, **REQUEST)
    assert isinstance(token, str) and "=" not in token
    assert sealer.open(token, **REQUEST) == PAYLOAD  # no exp or other envelope fields
    # a fresh nonce each time: same input, different tokens, both valid
    again = sealer.seal(PAYLOAD, **REQUEST)
    assert again != token and sealer.open(again, **REQUEST) == PAYLOAD
    assert raw(again)[5:17] != raw(token)[5:17]


def test_the_token_layout_is_version_key_id_nonce_then_ciphertext_and_tag() -> None:
    sealer = StateSealer("travel", [KEY], clock=Clock(1_000_000.0))
    data = raw(sealer.seal({}, **REQUEST))
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"mcpsync requestState v1").derive(KEY.encode())
    assert data[0] == 1
    assert bytes(data[1:5]) == hashlib.sha256(derived).digest()[:4]
    plaintext = b'{"exp":1000600.0,"state":{}}'  # the expiry travels inside, sealed
    assert len(data) == 1 + 4 + 12 + len(plaintext) + 16  # GCM adds exactly its 16-byte tag
    # the payload is not readable in the token
    secret_payload = {"card": "4111-1111-1111-1111"}
    token = sealer.seal(secret_payload, **REQUEST)
    assert b"4111" not in raw(token) and "4111" not in token


@pytest.mark.parametrize(("region", "index", "reason"), [
    ("version", 0, "malformed"),
    ("key id", 1, "unknown-key"),
    ("key id", 4, "unknown-key"),
    ("nonce", 5, "tampered-or-other-request"),
    ("nonce", 16, "tampered-or-other-request"),
    ("ciphertext", 17, "tampered-or-other-request"),
    ("ciphertext", -17, "tampered-or-other-request"),
    ("tag", -16, "tampered-or-other-request"),
    ("tag", -1, "tampered-or-other-request"),
])
def test_one_changed_byte_in_any_region_is_refused(region: str, index: int, reason: str) -> None:
    sealer = StateSealer("travel", [KEY])
    data = raw(sealer.seal(PAYLOAD, **REQUEST))
    assert len(data) > 17 + 16  # the ciphertext region is not empty
    data[index] ^= 0x01
    refused = refusal(sealer, encode(data))
    assert refused.reason == reason, region
    assert "without requestState" in str(refused) and "travel" in str(refused)


def test_a_truncated_token_is_refused() -> None:
    sealer = StateSealer("travel", [KEY])
    token = sealer.seal(PAYLOAD, **REQUEST)
    # shorter than header, nonce and tag together: cannot even be tried
    for cut in ("", token[:4], token[:43]):
        assert refusal(sealer, cut).reason == "malformed", len(cut)
    # long enough to try, but the tag no longer matches
    aligned = token[:len(token) - len(token) % 4 - 4]  # whole base64 groups: canonical
    assert refusal(sealer, aligned).reason == "tampered-or-other-request"
    assert refusal(sealer, encode(raw(token)[:-1])).reason == "tampered-or-other-request"
    # a length no base64 text can have
    odd = token + "A" * ((1 - len(token)) % 4)
    assert len(odd) % 4 == 1 and refusal(sealer, odd).reason == "malformed"


@pytest.mark.parametrize("token", [None, 42, 4.2, True, b"bytes", ["tok"], {"t": 1}])
def test_a_token_that_is_not_a_string_is_malformed(token: object) -> None:
    assert refusal(StateSealer("travel", [KEY]), token).reason == "malformed"


def test_text_outside_the_url_safe_alphabet_or_not_canonical_is_malformed() -> None:
    sealer = StateSealer("travel", [KEY], clock=Clock())
    # a payload size whose token ends in a partial base64 group (so it has spare low bits)
    token = next(t for t in (sealer.seal({"f": "x" * n}, **REQUEST) for n in range(3))
                 if len(t) % 4)
    assert sealer.open(token, **REQUEST)
    for text in (token + "==", token + "=", token[:10] + "!" + token[11:],
                 token[:10] + "+" + token[11:], token[:10] + "/" + token[11:], token + " ",
                 " " + token, token[:10] + "\n" + token[10:], "é" * 60):
        assert refusal(sealer, text).reason == "malformed", text[:20]
    # the same bytes spelled differently (stray low bits in the last character)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    respelled = token[:-1] + alphabet[alphabet.index(token[-1]) ^ 1]
    assert raw(respelled) == raw(token)
    assert refusal(sealer, respelled).reason == "malformed"


def test_a_huge_token_is_refused_before_any_decoding() -> None:
    sealer = StateSealer("travel", [KEY], max_bytes=1000)
    assert refusal(sealer, "A" * 1001).reason == "too-large"
    assert refusal(sealer, "!" * 1001).reason == "too-large"  # not "malformed": never decoded
    assert refusal(StateSealer("travel", [KEY]), "A" * (8 << 20)).reason == "too-large"
    token = StateSealer("travel", [KEY]).seal({}, **REQUEST)
    assert refusal(sealer, token + "A" * (1001 - len(token))).reason == "too-large"


def test_a_state_expires_after_ttl_by_the_sealers_clock() -> None:
    clock = Clock()
    sealer = StateSealer("travel", [KEY], clock=clock)
    token = sealer.seal(PAYLOAD, **REQUEST)
    clock.now += 599.9
    assert sealer.open(token, **REQUEST) == PAYLOAD
    clock.now += 0.1
    refused = refusal(sealer, token)
    assert refused.reason == "expired" and "expired" in str(refused)
    # the expiry is sealed: an opener with a longer ttl does not revive the token
    assert refusal(StateSealer("travel", [KEY], ttl=3600, clock=clock), token).reason \
        == "expired"
    short = StateSealer("travel", [KEY], ttl=5, clock=clock)
    token = short.seal({}, **REQUEST)
    clock.now += 4.9
    assert short.open(token, **REQUEST) == {}
    clock.now += 0.2
    assert refusal(short, token).reason == "expired"


@pytest.mark.parametrize("other", [
    {"method": "prompts/get"},
    {"target": "cancel_flight"},
    {"arguments": {"from": "AMS", "to": "NRT", "seats": 3}},
    {"arguments": {"from": "AMS", "to": "NRT"}},
    {"arguments": None},
    {"method": "resources/read", "target": "file:///book_flight"},
])
def test_a_state_replayed_on_another_request_is_refused(other: dict[str, Any]) -> None:
    sealer = StateSealer("travel", [KEY])
    token = sealer.seal(PAYLOAD, **REQUEST)
    assert refusal(sealer, token, **other).reason == "tampered-or-other-request"


def test_a_state_replayed_on_another_server_with_the_same_key_is_refused() -> None:
    token = StateSealer("travel", [KEY]).seal(PAYLOAD, **REQUEST)
    assert refusal(StateSealer("travel-2", [KEY]), token).reason == "tampered-or-other-request"
    assert StateSealer("travel", [KEY]).open(token, **REQUEST) == PAYLOAD


def test_a_token_of_another_key_is_unknown() -> None:
    token = StateSealer("travel", [KEY]).seal(PAYLOAD, **REQUEST)
    refused = refusal(StateSealer("travel", [NEW_KEY]), token)
    assert refused.reason == "unknown-key"


def test_rotation_new_key_first_still_opens_what_the_old_key_sealed() -> None:
    before = StateSealer("travel", [OLD_KEY])
    old_token = before.seal(PAYLOAD, **REQUEST)
    after = StateSealer("travel", [NEW_KEY, OLD_KEY])
    assert after.open(old_token, **REQUEST) == PAYLOAD
    new_token = after.seal(PAYLOAD, **REQUEST)
    assert raw(new_token)[1:5] != raw(old_token)[1:5]  # sealed with the first key: the new one
    assert StateSealer("travel", [NEW_KEY]).open(new_token, **REQUEST) == PAYLOAD
    assert refusal(before, new_token).reason == "unknown-key"
    # once the old key is dropped, its tokens are unknown
    assert refusal(StateSealer("travel", [NEW_KEY]), old_token).reason == "unknown-key"


def test_two_sealers_with_the_same_key_open_each_others_tokens() -> None:
    one, two = StateSealer("travel", [KEY]), StateSealer("travel", [KEY.encode()])
    assert two.open(one.seal(PAYLOAD, **REQUEST), **REQUEST) == PAYLOAD
    assert one.open(two.seal({"x": 1}, **REQUEST), **REQUEST) == {"x": 1}


def test_the_environment_key_is_used_when_no_keys_are_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, f" {NEW_KEY} , {KEY},")
    from_env = StateSealer("travel")
    assert repr(from_env) == "StateSealer(server_name='travel', keys=2)"
    # the first entry seals, every entry opens
    assert StateSealer("travel", [NEW_KEY]).open(from_env.seal({"a": 1}, **REQUEST),
                                                 **REQUEST) == {"a": 1}
    assert from_env.open(StateSealer("travel", [KEY]).seal({"b": 2}, **REQUEST),
                         **REQUEST) == {"b": 2}


def test_without_any_key_each_sealer_has_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = StateSealer("travel"), StateSealer("travel")
    token = one.seal(PAYLOAD, **REQUEST)
    assert one.open(token, **REQUEST) == PAYLOAD
    assert refusal(two, token).reason == "unknown-key"


def test_a_bad_environment_key_is_an_error_that_does_not_echo_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, " , ")
    with pytest.raises(ValueError, match=f"{ENV_KEYS} is set but holds no key"):
        StateSealer("travel")
    monkeypatch.setenv(ENV_KEYS, f"{KEY},tooShortSecret")
    with pytest.raises(ValueError) as caught:
        StateSealer("travel")
    assert f"{ENV_KEYS} entry 2" in str(caught.value) and "16" in str(caught.value)
    assert "tooShortSecret" not in str(caught.value) and KEY not in str(caught.value)


def test_keys_are_checked_and_never_echoed() -> None:
    with pytest.raises(ValueError) as caught:
        StateSealer("travel", [KEY, "short-secret"])
    assert "requestState key 2" in str(caught.value) and "short-secret" not in str(caught.value)
    with pytest.raises(ValueError, match="shorter than 16 bytes"):
        StateSealer("travel", [b"fifteen bytes!!"])
    with pytest.raises(TypeError, match="str or bytes"):
        StateSealer("travel", [12345678901234567890])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"keys=\[secret\]") as single:
        StateSealer("travel", KEY)
    assert KEY not in str(single.value)
    with pytest.raises(ValueError, match="keys is empty"):
        StateSealer("travel", [])
    for ttl in (0, -1, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="ttl"):
            StateSealer("travel", [KEY], ttl=ttl)
    with pytest.raises(ValueError, match="max_bytes"):
        StateSealer("travel", [KEY], max_bytes=10)


def test_repr_and_every_error_text_hold_no_key_and_no_payload() -> None:
    clock = Clock()
    sealer = StateSealer("travel", [KEY, OLD_KEY], clock=clock, max_bytes=400)
    assert repr(sealer) == "StateSealer(server_name='travel', keys=2)"
    texts = [repr(sealer), str(sealer)]
    token = sealer.seal(PAYLOAD, **REQUEST)
    data = raw(token)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    unknown = bytearray(data)
    unknown[2] ^= 1
    for bad in (None, "x" * 401, "short", encode(flipped), encode(unknown)):
        texts.append(str(refusal(sealer, bad)))
    texts.append(str(refusal(sealer, token, target="other")))
    clock.now += 601
    texts.append(str(refusal(sealer, token)))
    with pytest.raises(StateTooLarge) as too_large:
        sealer.seal({"blob": "Q" * 500, **PAYLOAD}, **REQUEST)
    texts.append(str(too_large.value))
    secrets = [KEY, KEY[:16], OLD_KEY.decode("latin-1"), OLD_KEY.hex(), "Zürich", "東京",
               "payload-marker-7f3a", "AMS", "NRT", "book_flight"]
    for text in texts:
        for secret in secrets:
            assert secret not in text, (secret, text)
    reasons = {refusal(sealer, token).reason}
    assert reasons == {"expired"}
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(sealer)


def test_one_sealer_serves_many_threads_at_once() -> None:
    sealer = StateSealer("travel", [KEY])

    def rounds(worker: int) -> int:
        done = 0
        for i in range(200):
            args = {"worker": worker, "i": i}
            token = sealer.seal({"w": worker, "i": i}, method="tools/call", target="t",
                                arguments=args)
            assert sealer.open(token, method="tools/call", target="t",
                               arguments=args) == {"w": worker, "i": i}
            done += 1
        return done

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="test-state") as pool:
        assert sum(pool.map(rounds, range(8))) == 1600


def test_a_refusal_survives_pickling_with_its_reason() -> None:
    refused = refusal(StateSealer("travel", [KEY]), "nope")
    again = pickle.loads(pickle.dumps(refused))
    assert isinstance(again, StateRefused) and isinstance(again, ValueError)
    assert again.reason == "malformed" and str(again) == str(refused)


def test_the_arguments_digest_ignores_dict_key_order_only() -> None:
    sealer = StateSealer("travel", [KEY])
    args = {"b": {"y": 2, "x": [1, {"q": 1, "p": 2}]}, "a": "é"}
    token = sealer.seal(PAYLOAD, method="tools/call", target="t", arguments=args)
    reordered = json.loads('{"a": "é", "b": {"x": [1, {"p": 2, "q": 1}], "y": 2}}')
    assert list(reordered) != list(args)
    assert sealer.open(token, method="tools/call", target="t", arguments=reordered) == PAYLOAD
    # list order is meaning, not layout
    swapped = {"a": "é", "b": {"x": [{"p": 2, "q": 1}, 1], "y": 2}}
    assert refusal(sealer, token, method="tools/call", target="t",
                   arguments=swapped).reason == "tampered-or-other-request"


def test_seal_refuses_a_token_over_max_bytes_and_fills_up_to_it() -> None:
    sealer = StateSealer("travel", [KEY], max_bytes=200)
    largest = 0
    for size in range(200):
        try:
            token = sealer.seal({"f": "x" * size}, **REQUEST)
        except StateTooLarge as exc:
            assert "over the limit of 200" in str(exc) and "bytes" in str(exc)
            continue
        assert len(token) <= 200
        assert sealer.open(token, **REQUEST) == {"f": "x" * size}
        largest = max(largest, len(token))
    assert largest >= 197  # unpadded base64 grows by 1-2 characters per byte of state
    with pytest.raises(StateTooLarge) as caught:
        StateSealer("travel", [KEY]).seal({"blob": "y" * 70_000}, **REQUEST)
    assert "65536" in str(caught.value) and "93" in str(caught.value)  # ~93 kB token


def test_seal_wants_a_json_object() -> None:
    sealer = StateSealer("travel", [KEY])
    with pytest.raises(TypeError, match="dict"):
        sealer.seal(["a"], **REQUEST)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sealer.seal({"when": object()}, **REQUEST)
    with pytest.raises(ValueError):
        sealer.seal({"x": float("nan")}, **REQUEST)


def test_an_authentic_plaintext_that_is_not_our_envelope_is_malformed() -> None:
    """Only a holder of the key could make one; still, it is refused, never trusted."""
    sealer = StateSealer("travel", [KEY])
    key_id = raw(sealer.seal({}, **REQUEST))[1:5]
    header = bytes([1]) + bytes(key_id)
    cipher = sealer._ciphers[bytes(key_id)]
    aad = sealer._aad(header, REQUEST["method"], REQUEST["target"], REQUEST["arguments"])
    for plaintext in (b"[1,2]", b'{"exp":1e18,"state":[1]}', b'{"state":{}}',
                      b'{"exp":true,"state":{}}', b"\xff\xfe", b"not json"):
        nonce = os.urandom(12)
        token = encode(header + nonce + cipher.encrypt(nonce, plaintext, aad))
        refused = refusal(sealer, token)
        assert refused.reason == "malformed", plaintext
        assert refused.__context__ is None  # the plaintext does not ride along


CHILD = r'''
import sys
from mcpsync.server._state import StateSealer

sealer = StateSealer("travel")  # keys from MCPSYNC_STATE_KEY
request = {"method": "tools/call", "target": "book_flight", "arguments": {"seats": 2}}
print(sealer.seal({"from": "child", "pid": __import__("os").getpid()}, **request))
print(sealer.open(sys.stdin.readline().strip(), **request)["from"])
'''


def test_two_real_processes_share_states_through_the_environment_key(tmp_path: Path) -> None:
    request: dict[str, Any] = {"method": "tools/call", "target": "book_flight",
                               "arguments": {"seats": 2}}
    here = StateSealer("travel", [NEW_KEY, KEY])
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    env = {**os.environ, ENV_KEYS: f"{KEY},{NEW_KEY}"}
    mine = here.seal({"from": "parent"}, **request)  # sealed with NEW_KEY, the child's second
    proc = subprocess.run([sys.executable, str(script)], input=mine + "\n", env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    token, opened = proc.stdout.split()
    assert opened == "parent"
    state = here.open(token, **request)
    assert state["from"] == "child" and state["pid"] != os.getpid()
    # and a process without the key cannot open either
    env.pop(ENV_KEYS)
    proc = subprocess.run([sys.executable, str(script)], input=mine + "\n", env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode != 0 and "unknown-key" in proc.stderr
    assert KEY not in proc.stderr and NEW_KEY not in proc.stderr


def test_the_example_in_docs_server_md_runs(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (DOCS / "server.md").read_text(encoding="utf-8")
    section = doc.split("## Sealed request state", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "sealed_state.py"
    script.write_text(block, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != ENV_KEYS}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=30, cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["{'confirmed': True}",
                                        "tampered-or-other-request", "expired"]
