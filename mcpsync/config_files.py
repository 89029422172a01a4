"""Read the MCP config files other tools write: Claude Desktop, Claude Code, Cursor, VS Code.

Two dialects exist. ``{"mcpServers": {id: entry}}`` is Claude Desktop's, Claude Code's
(``.mcp.json``) and Cursor's; ``{"servers": {id: entry}, "inputs": [...]}`` is VS Code's
(``.vscode/mcp.json``). Both hold the same entry fields, and both expand ``${...}`` variables
in the places a server's launch needs them. Reading one lets a user point mcpsync at the file
they already maintain instead of copying it into Python.

Everything is checked here, once, and every problem raises
:class:`~mcpsync.errors.ConfigError` naming the file and the key path
(``mcpServers.github.args[2]``), so a bad file fails before anything is spawned. Messages
name variables and keys, never values: a config's env and headers routinely hold secrets.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from mcpsync._config_oauth import ConfigOAuth
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError

__all__ = ["default_config_path", "expand", "load_config"]

_log = logging.getLogger("mcpsync.config")

_DIALECTS = ("mcpServers", "servers")
# Entry keys we read; anything else goes to ServerConfig.extra with a warning.
_KNOWN = frozenset({
    "command", "args", "env", "cwd", "url", "type", "headers", "disabled",
    "name", "timeout", "scope", "secret_ref", "secret_format", "gateway", "oauth",
})
# Entry keys only the gateway reads (the bridge's "era"): kept in ServerConfig.extra, unwarned.
_GATEWAY_KEYS = frozenset({"era"})
# Keys of an entry's "oauth" object (VS Code, Claude Code), and what each becomes.
_OAUTH_KEYS = ("clientId", "callbackPort", "scopes", "authServerMetadataUrl")
_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "sse": "sse"}
_EXPANSION = re.compile(r"\$\{([^}]*)\}")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_VAR_DEFAULT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):-(.*)\Z", re.DOTALL)
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


# -- expansion ---------------------------------------------------------------------------

def _user_home(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or environ.get("USERPROFILE") or os.path.expanduser("~")


def expand(text: str, *, environ: Mapping[str, str], workspace_folder: str,
           where: str) -> str:
    """Expand the ``${...}`` variables of one config string.

    Understood: ``${VAR}`` and ``${VAR:-default}`` (Claude Code; the default applies when
    ``VAR`` is unset or empty, as in a shell), ``${env:VAR}`` (VS Code, Cursor),
    ``${workspaceFolder}``, ``${workspaceFolderBasename}``, ``${userHome}`` and
    ``${pathSeparator}``. An unset variable without a default, ``${input:...}`` (a library
    cannot prompt) and any other ``${...}`` raise :class:`~mcpsync.errors.ConfigError`
    starting with ``where`` (``"/x/.mcp.json: mcpServers.github.args[2]"``).
    ``{{secret_file}}`` and ``{{worktree_root}}`` are left alone for the Manager.
    """

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner == "workspaceFolder":
            return workspace_folder
        if inner == "workspaceFolderBasename":
            return os.path.basename(workspace_folder.rstrip("\\/")) or workspace_folder
        if inner == "userHome":
            return _user_home(environ)
        if inner == "pathSeparator":
            return os.sep
        if inner.startswith("input:"):
            raise ConfigError(f"{where}: {match.group(0)} asks for user input, which a "
                              f"library cannot prompt for; put the value in an environment "
                              f"variable and write ${{env:NAME}} instead")
        name = inner[4:] if inner.startswith("env:") else inner
        if _VAR.match(name):
            value = environ.get(name)
            if value is None:
                raise ConfigError(f"{where}: environment variable {name!r} is not set "
                                  f"(set it, or write ${{{name}:-default}})")
            return value
        with_default = _VAR_DEFAULT.match(inner)
        if with_default:
            return environ.get(with_default.group(1)) or with_default.group(2)
        raise ConfigError(f"{where}: unknown variable {match.group(0)} (known: ${{VAR}}, "
                          f"${{VAR:-default}}, ${{env:VAR}}, ${{workspaceFolder}}, "
                          f"${{workspaceFolderBasename}}, ${{userHome}}, ${{pathSeparator}})")

    return _EXPANSION.sub(one, text)


# -- reading -----------------------------------------------------------------------------

def _strip_jsonc(text: str) -> str:
    """Blank out ``//`` and ``/* */`` comments and trailing commas, outside strings.

    VS Code and Cursor read their config files as JSONC, so real files carry comments. Each
    removed character becomes a space (newlines stay), so ``json`` still reports the line and
    column of the original text.
    """
    out = list(text)
    i, n = 0, len(text)
    last_comma = -1  # index of a comma seen since the last significant character
    while i < n:
        ch = text[i]
        if ch == '"':
            last_comma = -1
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif ch == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out[i:end] = [c if c in "\r\n" else " " for c in text[i:end]]
            i = end
        elif ch == ",":
            last_comma = i
            i += 1
        elif ch in "}]":
            if last_comma >= 0:
                out[last_comma] = " "
            last_comma = -1
            i += 1
        else:
            if not ch.isspace():
                last_comma = -1
            i += 1
    return "".join(out)


def _read_file(path: str) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as stream:
            text = stream.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: "
                          f"{exc.strerror or exc}") from None
    try:
        return json.loads(_strip_jsonc(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg}") from None


def _default_workspace(path: str | None) -> str:
    """The parent of a ``.vscode`` directory holding the file, else the file's directory."""
    if path is None:
        return os.getcwd()
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.basename(directory) == ".vscode":
        return os.path.dirname(directory)
    return directory


def _key_path(parent: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__


class _Entry:
    """Reads one server entry, naming the file and key path in every error."""

    def __init__(self, file: str, path: str, entry: Mapping[str, Any], *,
                 environ: Mapping[str, str], workspace_folder: str) -> None:
        self.file = file
        self.path = path
        self.entry = entry
        self.environ = environ
        self.workspace_folder = workspace_folder

    def error(self, key_path: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.file}: {key_path}: {problem}")

    def expand(self, text: str, key_path: str) -> str:
        return expand(text, environ=self.environ, workspace_folder=self.workspace_folder,
                      where=f"{self.file}: {key_path}")

    def string(self, key: str, *, expanded: bool = True) -> str | None:
        value = self.entry.get(key)
        if value is None:
            return None
        where = _key_path(self.path, key)
        if not isinstance(value, str):
            raise self.error(where, f"expected a string, got {_type_name(value)}")
        return self.expand(value, where) if expanded else value

    def boolean(self, key: str) -> bool:
        value = self.entry.get(key, False)
        if not isinstance(value, bool):
            raise self.error(_key_path(self.path, key),
                             f"expected true or false, got {_type_name(value)}")
        return value

    def args(self) -> list[str]:
        value = self.entry.get("args")
        where = _key_path(self.path, "args")
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(where, f"expected an array of strings, got {_type_name(value)}")
        out = []
        for index, arg in enumerate(value):
            item = f"{where}[{index}]"
            if not isinstance(arg, str):
                raise self.error(item, f"expected a string, got {_type_name(arg)}")
            out.append(self.expand(arg, item))
        return out

    def mapping(self, key: str, *, allow_null: bool) -> dict[str, str | None]:
        value = self.entry.get(key)
        where = _key_path(self.path, key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(where, f"expected an object, got {_type_name(value)}")
        out: dict[str, str | None] = {}
        for name, setting in value.items():
            item = _key_path(where, str(name))
            if setting is None and allow_null:
                out[name] = None
                continue
            if not isinstance(setting, str):
                raise self.error(item, f"expected a string, got {_type_name(setting)}")
            out[name] = self.expand(setting, item)
        return out

    def timeout(self) -> float | None:
        value = self.entry.get("timeout")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(_key_path(self.path, "timeout"),
                             f"expected a number of seconds, got {_type_name(value)}")
        return float(value)

    def kind(self) -> str:
        """``stdio``, ``http`` or ``sse``, checked against command and url."""
        has_command = self.entry.get("command") is not None
        has_url = self.entry.get("url") is not None
        raw = self.string("type", expanded=False)
        where = _key_path(self.path, "type")
        if raw is None:
            if has_command and has_url:
                raise self.error(self.path, "has both command (stdio) and url (HTTP); keep one")
            if not has_command and not has_url:
                raise self.error(self.path, "needs command (a stdio server) or url (an HTTP "
                                            "server)")
            return "stdio" if has_command else "http"
        kind = _TYPES.get(raw)
        if kind is None:
            raise self.error(where, f"unknown type {raw!r} (expected 'stdio', 'http', "
                                    f"'streamable-http' or 'sse')")
        if kind == "stdio" and (has_url or not has_command):
            raise self.error(where, "type 'stdio' needs command and no url")
        if kind != "stdio" and (has_command or not has_url):
            raise self.error(where, f"type {raw!r} needs url and no command")
        return kind

    def oauth(self, headers: Mapping[str, str | None], *, store: Any,
              interactive: bool) -> ConfigOAuth | None:
        """This HTTP entry's own OAuth provider (made on demand), from its ``oauth`` object.

        Every HTTP entry gets one, as the editors start OAuth on any 401; an entry with a
        static ``Authorization`` header does not (that header is its credential), and an
        ``oauth`` object beside such a header is an error naming both.
        """
        value = self.entry.get("oauth")
        where = _key_path(self.path, "oauth")
        static = [k for k in headers if k.lower() == "authorization"]
        if value is not None and not isinstance(value, Mapping):
            raise self.error(where, f"expected an object, got {_type_name(value)}")
        if static:
            if value is not None:
                raise self.error(where, f"an oauth object and a static "
                                        f"{_key_path(_key_path(self.path, 'headers'), static[0])}"
                                        f" header both give this server's credentials; keep "
                                        f"one")
            return None
        settings: Mapping[str, Any] = value or {}
        unknown = [k for k in settings if k not in _OAUTH_KEYS]
        if unknown:
            _log.warning("%s: %s: ignoring unknown key(s) %s (known: %s)", self.file, where,
                         ", ".join(repr(k) for k in unknown), ", ".join(_OAUTH_KEYS))
        client_id = settings.get("clientId")
        if client_id is not None and (not isinstance(client_id, str) or not client_id):
            raise self.error(f"{where}.clientId",
                             f"expected a non-empty string, got {_type_name(client_id)}")
        port = settings.get("callbackPort", 0)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise self.error(f"{where}.callbackPort",
                             f"expected a port number 0-65535, got {port!r}")
        scopes = settings.get("scopes")
        if scopes is not None and not isinstance(scopes, str):
            raise self.error(f"{where}.scopes", f"expected a space-separated string, got "
                                                f"{_type_name(scopes)}")
        metadata_url = settings.get("authServerMetadataUrl")
        if metadata_url is not None:
            metadata_url = self._metadata_url(metadata_url, f"{where}.authServerMetadataUrl")
        return ConfigOAuth(
            self.string("url") or "", client_id=client_id, redirect_port=port,
            scopes=scopes.split() if scopes is not None else None, metadata_url=metadata_url,
            store=store, interactive=interactive)

    def _metadata_url(self, value: object, where: str) -> str:
        """``authServerMetadataUrl``: https only (loopback http excepted), like every URL
        mcpauth fetches; checked here so the file, not a later 401, gets the blame.

        Judged by the origin the connection will really use (the same check as redirects),
        so a URL that one parser reads as loopback and requests would send elsewhere is
        refused rather than fetched in cleartext.
        """
        # import_module first: a bare from-import in a thread that waited while a Ctrl-C
        # stopped another thread's first import of _origin reads the half-built module.
        importlib.import_module("mcpsync._origin")
        from mcpsync._origin import (
            UnsafeURL,
            connection_origin,
            is_loopback_host,
            refuse_hostile,
        )

        if not isinstance(value, str):
            raise self.error(where, f"expected an https URL, got {_type_name(value)}")
        text = self.expand(value, where)
        try:
            refuse_hostile(text)
            origin = connection_origin(text)
        except UnsafeURL as exc:
            raise self.error(where, f"not a valid URL: {exc}; write a plain "
                                    f"https://host/path URL") from None
        if origin.scheme != "https" and not is_loopback_host(origin.host):
            raise self.error(where, f"must be an https:// URL (http only for localhost, "
                                    f"127.0.0.0/8 or [::1]), got http to {origin.host}; "
                                    f"authorization metadata over cleartext could be forged")
        return text

    def build(self, server_id: str, unknown: list[str], *, token_store: Any = None,
              interactive_login: bool = False) -> ServerConfig:
        kind = self.kind()
        values: dict[str, Any] = {
            "id": server_id,
            "name": self.string("name", expanded=False) or server_id,
            "args": self.args(),
            "env": self.mapping("env", allow_null=True),
            "headers": self.mapping("headers", allow_null=False),
            "disabled": self.boolean("disabled"),
            "gateway": self.boolean("gateway"),
            "extra": {key: copy.deepcopy(self.entry[key]) for key in unknown},
        }
        if kind == "stdio":
            values["command"] = self.string("command")
            if self.entry.get("oauth") is not None:
                raise self.error(_key_path(self.path, "oauth"),
                                 "only for HTTP servers (url); a stdio server gets its "
                                 "credentials through env")
        else:
            values["url"] = self.string("url")
            values["transport"] = "sse" if kind == "sse" else ""
            values["auth"] = self.oauth(values["headers"], store=token_store,
                                        interactive=interactive_login)
        for key in ("cwd",):
            text = self.string(key)
            if text is not None:
                values[key] = text
        for key in ("scope", "secret_ref", "secret_format"):
            text = self.string(key, expanded=False)
            if text is not None:
                values[key] = text
        timeout = self.timeout()
        if timeout is not None:
            values["timeout"] = timeout
        try:
            return ServerConfig(**values)
        except ConfigError as exc:
            # ServerConfig names the field; add where it came from.
            raise self.error(self.path, exc.message) from None


def load_config(source: str | os.PathLike[str] | Mapping[str, Any], *,
                workspace_folder: str | None = None,
                environ: Mapping[str, str] | None = None,
                token_store: Any = None,
                interactive_login: bool = False) -> list[ServerConfig]:
    """Read the servers of a config file (a path) or of an already-parsed dict.

    Both dialects are read: ``mcpServers`` (Claude Desktop, Claude Code, Cursor) and
    ``servers`` (VS Code; its ``inputs`` only matter if referenced, and then fail, because a
    library cannot prompt). An entry's key becomes the config's ``id`` and default ``name``.
    Variables come from ``environ`` (default ``os.environ``); ``${workspaceFolder}`` is
    ``workspace_folder``, by default the parent of a ``.vscode`` directory holding the file,
    else the file's own directory, else (for a dict) the current directory. Unknown entry
    keys are kept in ``ServerConfig.extra`` with one WARNING per key per file. The configs
    come back in file order. Any problem raises :class:`~mcpsync.errors.ConfigError` naming
    the file and the key path.

    Each HTTP entry without a static ``Authorization`` header gets its own OAuth provider in
    ``auth``, made at its first 401 (or first request, when ``token_store`` already holds a
    login for it); its ``oauth`` object (``clientId``, ``callbackPort``, space-separated
    ``scopes``, ``authServerMetadataUrl``) configures it. ``token_store`` is a
    ``mcpauth.TokenStore``, by default the file store that ``mcpsync login`` writes; no
    browser opens unless ``interactive_login=True``.
    """
    env = os.environ if environ is None else environ
    if isinstance(source, Mapping):
        file = "<config dict>"
        data: Any = source
        folder = workspace_folder if workspace_folder is not None else _default_workspace(None)
    else:
        file = os.fspath(source)
        data = _read_file(file)
        folder = workspace_folder if workspace_folder is not None else _default_workspace(file)
    if not isinstance(data, Mapping):
        raise ConfigError(f"{file}: expected a JSON object at the top level, got "
                          f"{_type_name(data)}")
    dialects = [key for key in data if key in _DIALECTS]
    if not dialects:
        raise ConfigError(f"{file}: no 'mcpServers' (Claude, Cursor) or 'servers' (VS Code) "
                          f"object; this does not look like an MCP config file")
    seen: dict[str, str] = {}
    warned: dict[str, list[str]] = {}
    configs: list[ServerConfig] = []
    for dialect in dialects:
        servers = data[dialect]
        if not isinstance(servers, Mapping):
            raise ConfigError(f"{file}: {dialect}: expected an object of servers, got "
                              f"{_type_name(servers)}")
        for server_id, entry in servers.items():
            path = _key_path(dialect, str(server_id))
            if not isinstance(server_id, str) or not server_id:
                raise ConfigError(f"{file}: {path}: a server id must be a non-empty string")
            if server_id in seen:
                raise ConfigError(f"{file}: server id {server_id!r} appears under both "
                                  f"{seen[server_id]} and {dialect}; keep one")
            seen[server_id] = dialect
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{file}: {path}: expected an object, got "
                                  f"{_type_name(entry)}")
            unknown = [key for key in entry if key not in _KNOWN]
            for key in unknown:
                if key not in _GATEWAY_KEYS:
                    warned.setdefault(str(key), []).append(server_id)
            reader = _Entry(file, path, entry, environ=env, workspace_folder=folder)
            configs.append(reader.build(server_id, unknown, token_store=token_store,
                                        interactive_login=interactive_login))
    for key, ids in warned.items():
        _log.warning("%s: ignoring unknown key %r (in %s)", file, key,
                     ", ".join(repr(i) for i in ids))
    return configs


def default_config_path(cwd: str | None = None,
                        environ: Mapping[str, str] | None = None) -> str | None:
    """Where the ``mcpsync`` command looks for servers when not told.

    ``$MCPSYNC_CONFIG`` if set, else ``./.mcp.json``, else ``./.vscode/mcp.json`` (relative
    to ``cwd``), else ``None``.
    """
    env = os.environ if environ is None else environ
    configured = env.get("MCPSYNC_CONFIG")
    if configured:
        return configured
    base = os.getcwd() if cwd is None else cwd
    for candidate in (os.path.join(base, ".mcp.json"),
                      os.path.join(base, ".vscode", "mcp.json")):
        if os.path.isfile(candidate):
            return candidate
    return None
