"""What the trust prompt shows of a project config: enough to judge it, nothing it can forge.

The prompt is the one moment a person reads a file written by someone they may not trust,
so everything printed from the file is made inert and complete:

- Every control, format, separator or otherwise invisible character is written as an escape
  (ESC as ``\\x1b``, a zero-width space as ``\\u200b``; a backslash as ``\\\\`` so the two
  cannot be confused). A file cannot erase a line (``\\x1b[2K\\r``), hide text
  (``\\x1b[8m``) or fake a question.
- A stdio server's arguments are shown as written in the file, before ``${...}``
  expansion: ``-c 'import os; ...'`` is what a reader must see, while an expanded
  ``${TOKEN}`` (a secret from the environment) must not appear. Each argument is cut to a
  sane length with an ellipsis, and a long list ends with how many were left out. The
  names of its environment variables (never their values) and its ``cwd`` follow.
- An HTTP server shows the origin its connection will really use (the same check as
  redirects), or that its URL is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mcpsync._printable import printable as _printable
from mcpsync.cli._errors import EXIT_USAGE, CLIError

if TYPE_CHECKING:
    from mcpsync.config import ServerConfig

__all__ = ["printable", "read_raw", "what_it_starts"]

_ARG_LIMIT = 80      # characters of one argument, cwd or name, after escaping
_ARGS_SHOWN = 24     # arguments listed before "... and N more"
_NAMES_SHOWN = 24    # env names listed before "... and N more"


def printable(text: str, limit: int = _ARG_LIMIT) -> str:
    """``text`` with every invisible or terminal-controlling character escaped (see
    :mod:`mcpsync._printable`), cut to about ``limit`` characters with ``…`` marking the
    cut."""
    return _printable(text, limit)


def _word(text: str) -> str:
    """One argument as a shell would need it written, made printable first."""
    return shlex.quote(printable(text))


def read_raw(path: str, digest: str) -> Mapping[str, Any]:
    """The file's JSON as written (nothing expanded), provided its bytes still hash to
    ``digest``: what the prompt shows must be what was loaded and what will be trusted."""
    importlib.import_module("mcpsync.config_files")
    from mcpsync.config_files import _strip_jsonc

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise CLIError(f"cannot read config file {path!r}: {exc.strerror or exc}",
                       EXIT_USAGE) from None
    if hashlib.sha256(raw).hexdigest() != digest:
        raise CLIError(f"{path} changed while it was read; run the command again",
                       EXIT_USAGE)
    try:
        doc = json.loads(_strip_jsonc(raw.decode("utf-8-sig")))
    except (UnicodeDecodeError, ValueError):   # it loaded a moment ago, with this content
        return {}
    return doc if isinstance(doc, Mapping) else {}


def _entry(doc: Mapping[str, Any], server_id: str) -> Mapping[str, Any]:
    for dialect in ("mcpServers", "servers"):
        servers = doc.get(dialect)
        if isinstance(servers, Mapping) and isinstance(servers.get(server_id), Mapping):
            found: Mapping[str, Any] = servers[server_id]
            return found
    return {}


def _names(names: Sequence[str]) -> str:
    shown = [printable(n) for n in names[:_NAMES_SHOWN]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", … and {more} more" if more > 0 else "")


def _runs(config: ServerConfig, entry: Mapping[str, Any], indent: str) -> list[str]:
    command = entry.get("command")
    raw_args = entry.get("args")
    if not isinstance(command, str):
        command = config.command or ""
    # The loaded config came from this very content, so "args" is a list of strings.
    args = [str(a) for a in raw_args] if isinstance(raw_args, list) else []
    words = [_word(command), *(_word(a) for a in args[:_ARGS_SHOWN])]
    more = len(args) - _ARGS_SHOWN
    if more > 0:
        words.append(f"… and {more} more argument{'' if more == 1 else 's'}")
    lines = [f"runs {' '.join(words)}"]
    env = entry.get("env")
    if isinstance(env, Mapping) and env:
        lines.append(f"{indent}with env {_names([str(k) for k in env])} (values not shown)")
    cwd = entry.get("cwd")
    if isinstance(cwd, str):
        lines.append(f"{indent}in {_word(cwd)}")
    return lines


def _connects_to(url: str) -> str:
    """Where an HTTP server's connection will really go, by the same check as redirects:
    a URL that parsers read differently (``http://127.0.0.1:9\\\\@crm.example.com/``, which
    ``urlsplit`` calls crm.example.com while requests connects to 127.0.0.1:9) is reported
    as refused rather than given a host name it will not reach."""
    importlib.import_module("mcpsync._origin")
    from mcpsync._origin import UnsafeURL, connection_origin, refuse_hostile

    try:
        refuse_hostile(url)
        return f"connects to {connection_origin(url)}"
    except UnsafeURL as exc:
        return f"URL refused: {exc}; do not trust a file with such a URL"


def what_it_starts(doc: Mapping[str, Any], configs: Sequence[ServerConfig]) -> list[str]:
    """The prompt's lines for the servers of a config: ``doc`` is the file as written,
    ``configs`` what was loaded from it (expanded: used only for the URL's origin)."""
    lines = []
    for config in configs:
        head = f"  {printable(config.id)}: "
        if config.command is not None:
            first, *rest = _runs(config, _entry(doc, config.id), " " * len(head))
            lines.append(head + first)
            lines.extend(rest)
        else:
            lines.append(head + _connects_to(config.url or ""))
    return lines
