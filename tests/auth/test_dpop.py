"""DPoP proofs checked by independent verifiers (RFC 9449).

Two verifiers that share no code with ``mcpauth.dpop``: one written here on top of
``cryptography`` (DER re-encoding of ``r || s``), and joserfc (which authlib depends on).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from requests.structures import CaseInsensitiveDict

from mcpauth.dpop import DPoPKey, DPoPProver, ath, check_server_supports_dpop
from mcpauth.errors import AuthError, DPoPError


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify(proof: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a proof the way a resource server would, with the key its header carries."""
    assert proof.count(".") == 2
    h64, p64, s64 = proof.split(".")
    for part in (h64, p64, s64):
        assert "=" not in part  # base64url without padding
    header = json.loads(_unb64(h64))
    claims = json.loads(_unb64(p64))
    jwk = header["jwk"]
    x = int.from_bytes(_unb64(jwk["x"]), "big")
    y = int.from_bytes(_unb64(jwk["y"]), "big")
    public = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    sig = _unb64(s64)
    assert len(sig) == 64  # JWS ES256 is raw r || s, not DER
    der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
    public.verify(der, f"{h64}.{p64}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
    return header, claims


def verify_joserfc(proof: str) -> dict[str, Any]:
    from joserfc import jws
    from joserfc.jwk import ECKey

    header = json.loads(_unb64(proof.split(".")[0]))
    obj = jws.deserialize_compact(proof, ECKey.import_key(header["jwk"]), algorithms=["ES256"])
    claims: dict[str, Any] = json.loads(obj.payload)
    return claims


@pytest.fixture(scope="module")
def key() -> DPoPKey:
    return DPoPKey.generate()


@pytest.fixture
def prover(key: DPoPKey) -> DPoPProver:
    return DPoPProver(key)


# -- the proof ---------------------------------------------------------------------------------

def test_proof_header_and_claims(prover: DPoPProver, key: DPoPKey) -> None:
    before = int(time.time())
    proof = prover.proof("post", "https://as.example/token")
    after = int(time.time())
    header, claims = verify(proof)
    assert header == {"typ": "dpop+jwt", "alg": "ES256", "jwk": key.public_jwk()}
    assert set(header["jwk"]) == {"kty", "crv", "x", "y"}  # public key only, no "d"
    assert header["jwk"]["kty"] == "EC" and header["jwk"]["crv"] == "P-256"
    assert set(claims) == {"jti", "htm", "htu", "iat"}  # no ath, no nonce here
    assert claims["htm"] == "POST"
    assert claims["htu"] == "https://as.example/token"
    assert before <= claims["iat"] <= after
    assert len(_unb64(claims["jti"])) == 16  # 128 random bits
    assert verify_joserfc(proof) == claims


def test_tampered_proof_fails_the_verifier(prover: DPoPProver) -> None:
    """The verifier is real: a changed claim breaks the signature."""
    h64, p64, s64 = prover.proof("GET", "https://r.example/mcp").split(".")
    claims = json.loads(_unb64(p64))
    claims["htm"] = "DELETE"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(InvalidSignature):
        verify(f"{h64}.{forged}.{s64}")


@pytest.mark.parametrize(("url", "htu"), [
    ("https://r.example/mcp?session=1", "https://r.example/mcp"),
    ("https://r.example/mcp#frag", "https://r.example/mcp"),
    ("https://r.example/mcp?a=1&b=2#frag", "https://r.example/mcp"),
    ("https://r.example:8443/a/b/", "https://r.example:8443/a/b/"),
    ("http://127.0.0.1:5000/token?", "http://127.0.0.1:5000/token"),
    ("https://r.example", "https://r.example"),
])
def test_htu_drops_query_and_fragment(prover: DPoPProver, url: str, htu: str) -> None:
    _, claims = verify(prover.proof("GET", url))
    assert claims["htu"] == htu


def test_jti_is_fresh_for_every_proof(prover: DPoPProver) -> None:
    jtis = {verify(prover.proof("POST", "https://r.example/mcp", access_token="t"))[1]["jti"]
            for _ in range(1000)}
    assert len(jtis) == 1000


def test_proofs_from_many_threads_are_valid_and_unique(prover: DPoPProver) -> None:
    proofs: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [prover.proof("POST", "https://r.example/mcp") for _ in range(50)]
        with lock:
            proofs.extend(mine)

    threads = [threading.Thread(target=work, name=f"test-dpop-{i}", daemon=True)
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(proofs) == 400
    assert len({verify(p)[1]["jti"] for p in proofs}) == 400


# -- ath and resource headers -----------------------------------------------------------------

def test_ath_matches_rfc_9449_example() -> None:
    # RFC 9449 §7.1 example access token and its ath.
    assert ath("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU") == (
        "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo")


def test_ath_is_unpadded_base64url_of_sha256() -> None:
    token = "an-access-token"
    expected = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest())
    assert ath(token) == expected.rstrip(b"=").decode()
    assert "=" not in ath(token)
    with pytest.raises(DPoPError) as info:
        ath("tøken")
    assert "tøken" not in str(info.value)


def test_resource_headers_carry_token_and_bound_proof(prover: DPoPProver) -> None:
    headers = prover.resource_headers("post", "https://r.example/mcp?x=1", "ACCESS-TOKEN")
    assert set(headers) == {"Authorization", "DPoP"}  # exactly one DPoP header
    assert headers["Authorization"] == "DPoP ACCESS-TOKEN"
    _, claims = verify(headers["DPoP"])
    assert claims["ath"] == ath("ACCESS-TOKEN")
    assert claims["htm"] == "POST" and claims["htu"] == "https://r.example/mcp"
    assert "ACCESS-TOKEN" not in headers["DPoP"]  # the proof carries only the hash


def test_token_request_proof_has_no_ath(prover: DPoPProver) -> None:
    _, claims = verify(prover.proof("POST", "https://as.example/token"))
    assert "ath" not in claims


# -- nonces ------------------------------------------------------------------------------------

def test_nonce_is_kept_per_origin(prover: DPoPProver) -> None:
    prover.record_nonce("https://as.example/token", "n-as")
    prover.record_nonce("https://r.example/mcp", "n-r")
    assert prover.nonce_for("https://as.example/other?q") == "n-as"
    assert prover.nonce_for("https://AS.example:443/") == "n-as"  # same origin
    assert prover.nonce_for("http://as.example/token") is None      # other scheme
    assert prover.nonce_for("https://as.example:8443/token") is None  # other port
    assert verify(prover.proof("POST", "https://as.example/token"))[1]["nonce"] == "n-as"
    assert verify(prover.proof("GET", "https://r.example/mcp"))[1]["nonce"] == "n-r"
    assert "nonce" not in verify(prover.proof("GET", "https://other.example/"))[1]


def test_explicit_nonce_wins(prover: DPoPProver) -> None:
    prover.record_nonce("https://as.example/", "recorded")
    _, claims = verify(prover.proof("POST", "https://as.example/token", nonce="given"))
    assert claims["nonce"] == "given"


def test_observe_replaces_the_nonce_and_ignores_responses_without_one(
        prover: DPoPProver) -> None:
    url = "https://r.example/mcp"
    prover.observe(url, {"Content-Type": "application/json"})
    assert prover.nonce_for(url) is None
    prover.observe(url, CaseInsensitiveDict({"dpop-nonce": "n1"}))
    assert prover.nonce_for(url) == "n1"
    prover.observe(url, {"dpop-nonce": "n2"})  # a plain dict with other casing
    assert prover.nonce_for(url) == "n2"
    prover.observe(url, {"DPoP-Nonce": "n3"})
    assert prover.nonce_for(url) == "n3"
    prover.observe(url, {"Content-Type": "text/plain"})
    assert prover.nonce_for(url) == "n3"  # kept
    assert verify(prover.proof("POST", url))[1]["nonce"] == "n3"


# -- keys --------------------------------------------------------------------------------------

def test_key_round_trips_through_private_jwk(key: DPoPKey) -> None:
    jwk = key.private_jwk()
    assert set(jwk) == {"kty", "crv", "x", "y", "d"}
    restored = DPoPKey.from_jwk(json.loads(json.dumps(jwk)))
    assert restored.public_jwk() == key.public_jwk()
    assert restored.thumbprint() == key.thumbprint()
    assert restored.private_jwk() == jwk
    header, _ = verify(DPoPProver(restored).proof("GET", "https://r.example/"))
    assert header["jwk"] == key.public_jwk()


def test_generated_keys_differ() -> None:
    assert DPoPKey.generate().thumbprint() != DPoPKey.generate().thumbprint()


def test_thumbprint_is_rfc_7638(key: DPoPKey) -> None:
    from joserfc.jwk import ECKey

    pub = key.public_jwk()
    canonical = json.dumps({"crv": pub["crv"], "kty": pub["kty"], "x": pub["x"],
                            "y": pub["y"]}, separators=(",", ":"))
    expected = base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest())
    assert key.thumbprint() == expected.rstrip(b"=").decode()
    assert key.thumbprint() == ECKey.import_key(pub).thumbprint()


def test_repr_shows_the_thumbprint_only(key: DPoPKey) -> None:
    d = key.private_jwk()["d"]
    for text in (repr(key), repr(DPoPProver(key)), str(key)):
        assert key.thumbprint() in text
        assert d not in text


@pytest.mark.parametrize("mutate", [
    lambda j: j.update(kty="RSA"),
    lambda j: j.update(crv="P-384"),
    lambda j: j.pop("d"),
    lambda j: j.update(d="!!not base64!!"),
    lambda j: j.update(x=j["y"]),  # public part does not match d
    lambda j: j.update(d="AAAA"),  # wrong length
])
def test_bad_jwk_is_a_dpop_error_without_the_secret(key: DPoPKey, mutate: Any) -> None:
    jwk = key.private_jwk()
    secret = jwk["d"]
    mutate(jwk)
    with pytest.raises(DPoPError) as info:
        DPoPKey.from_jwk(jwk)
    assert info.value.step == "dpop"
    assert secret not in str(info.value)


def test_only_p256_keys_are_accepted() -> None:
    with pytest.raises(DPoPError, match="P-256"):
        DPoPKey(ec.generate_private_key(ec.SECP384R1()))


# -- server support ----------------------------------------------------------------------------

def test_server_listing_es256_is_accepted() -> None:
    check_server_supports_dpop(["RS256", "ES256"], issuer="https://as.example")
    check_server_supports_dpop(("ES256",), issuer="https://as.example")


@pytest.mark.parametrize(("algs", "shown"), [
    (None, "absent"),
    ([], "[]"),
    (["RS256", "PS256"], "['RS256', 'PS256']"),
    (["es256"], "['es256']"),
])
def test_server_without_es256_is_a_dpop_error(algs: list[str] | None, shown: str) -> None:
    with pytest.raises(DPoPError) as info:
        check_server_supports_dpop(algs, issuer="https://as.example")
    err = info.value
    assert isinstance(err, AuthError)
    assert err.step == "dpop" and err.url == "https://as.example"
    assert "https://as.example" in str(err)
    assert shown in str(err)
