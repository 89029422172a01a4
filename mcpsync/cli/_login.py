"""OAuth in the ``mcpsync`` command: the ``login`` command, and using its stored login.

Both are the CLI's only contact with mcpauth and its token file, so they live together:
``login`` writes the token through ``FileTokenStore``, and :func:`_stored_login` reads the
same store back when a later command names that server's URL. mcpauth is imported inside
the functions, never at load time.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import TYPE_CHECKING, Any

from mcpsync._mcpauth_import import import_mcpauth
from mcpsync.cli._context import _Context
from mcpsync.cli._errors import EXIT_USAGE, CLIError
from mcpsync.cli._output import _json_doc, _Outcome

if TYPE_CHECKING:
    from mcpsync.config import ServerConfig

# The CLI's modules all log as "mcpsync.cli": --verbose and the quiet warning filter
# (cli/_logging.py) are set up for that one name.
_log = logging.getLogger("mcpsync.cli")


def _stored_login(config: ServerConfig) -> Any:
    """The auth hooks of a URL given as SERVER, when ``mcpsync login`` logged in to it.

    Only when the token file exists and records a login for this server (its resource index
    entry): otherwise ``None``, and nothing is created or discovered, so a 401 is exit 4 at
    once. The provider is non-interactive, so an expired login that cannot be refreshed
    ends in exit 4 (``LoginRequired``) rather than a browser window. (A server of a config
    file has its own provider already, see ``load_config``.)
    """
    if config.url is None or config.auth is not None \
            or any(k.lower() == "authorization" for k in config.headers):
        return None
    import os

    try:
        import_mcpauth()
        tokens = import_mcpauth("mcpauth.tokens")
        discovery = import_mcpauth("mcpauth.discovery")
    except ImportError as exc:
        # mcpauth ships with mcpsync, so this means something shadows it (e.g. a directory
        # named mcpauth in the current directory under `python -m`): say so, not silently.
        _log.warning("stored logins are not used: mcpauth cannot be imported (%s)", exc)
        return None
    if not os.path.exists(tokens.default_token_path()):
        return None
    store = tokens.FileTokenStore()
    if store.get(tokens.resource_index_key(discovery.canonical_resource(config.url))) is None:
        return None
    _log.debug("using the stored login for %s (%s)", config.url, store.path)
    importlib.import_module("mcpsync._config_oauth")
    from mcpsync._config_oauth import ConfigOAuth

    return ConfigOAuth(config.url, store=store, interactive=False)


def _cmd_login(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    url: str = args.url
    if not url.startswith(("http://", "https://")):
        raise CLIError(f"login needs an http:// or https:// URL, got {url!r}", EXIT_USAGE)
    try:
        import_mcpauth()
        importlib.import_module("mcpauth")
        from mcpauth import FileTokenStore, OAuthProvider
    except ImportError as exc:
        raise CLIError(f"login needs mcpauth, which is not available: {exc}",
                       EXIT_USAGE) from exc
    scopes = [s for group in (args.scope or []) for s in group.split()]

    def show_device_code(code: Any) -> None:
        where = getattr(code, "verification_uri_complete", None) \
            or getattr(code, "verification_uri", "")
        print(f"To log in, open {where} and enter the code {getattr(code, 'user_code', '')}",
              file=sys.stderr, flush=True)

    store = FileTokenStore()
    options: dict[str, Any] = {"store": store, "interactive": True,
                               "grant": "device_code" if args.device else "authorization_code"}
    if scopes:
        options["scopes"] = scopes
    if args.device:
        options["device_code_handler"] = show_device_code
    token = OAuthProvider(url, **options).login()
    scope = getattr(token, "scope", None)
    if ctx.json:
        return _Outcome(_json_doc({"url": url, "token_store": store.path, "scope": scope}))
    return _Outcome(f"logged in to {url}; the token is stored in {store.path}\n")
