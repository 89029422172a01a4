"""``import mcpauth`` stays light and never pulls in mcpsync."""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHECK = """
import sys
import mcpauth
light = sorted(m for m in ("mcpsync", "requests", "authlib", "cryptography")
               if m in sys.modules)
assert not light, f"import mcpauth loaded {light}"
mcpauth.OAuthProvider, mcpauth.FileTokenStore, mcpauth.LoginRequired
mcpauth.parse_challenges, mcpauth.client_metadata_document, mcpauth.Token
import mcpauth.provider, mcpauth.flows, mcpauth.dpop, mcpauth.discovery
import mcpauth.registration, mcpauth.tokens, mcpauth.challenge, mcpauth._loopback
leaked = sorted(m for m in sys.modules if m == "mcpsync" or m.startswith("mcpsync."))
assert not leaked, f"mcpauth imported {leaked}"
print("ok")
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.timeout(90)
def test_import_mcpauth_leaves_no_mcpsync_and_loads_nothing_heavy() -> None:
    done = _run(_CHECK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.timeout(90)
def test_every_public_name_resolves() -> None:
    done = _run("import mcpauth\n"
                "missing = [n for n in mcpauth.__all__ if not hasattr(mcpauth, n)]\n"
                "assert not missing, missing\n"
                "assert issubclass(mcpauth.LoginRequired, mcpauth.AuthError)\n"
                "assert 'OAuthProvider' in dir(mcpauth)\n"
                "print('ok')")
    assert done.returncode == 0, done.stderr


def test_unknown_attribute_is_an_attribute_error() -> None:
    import mcpauth

    with pytest.raises(AttributeError):
        mcpauth.NoSuchName  # noqa: B018
