"""The parsed global options of one ``mcpsync`` command and the config file they point at.

Every command reads the same few options and at most one config file; one object carries
them, and loads (and checks) the file only when a command asks for it, so commands that do
not need a config never read one.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mcpsync.cli._errors import EXIT_USAGE, CLIError, _describe

if TYPE_CHECKING:
    from mcpsync.config import ServerConfig

# The CLI's modules all log as "mcpsync.cli": --verbose and the quiet warning filter
# (cli/_logging.py) are set up for that one name.
_log = logging.getLogger("mcpsync.cli")


@dataclass
class _Context:
    """The parsed global options, and the config they point at (loaded on demand)."""

    config: str | None
    timeout: float | None
    json: bool
    trust_project_config: bool = False
    _loaded: tuple[str, list[ServerConfig]] | None = None
    # SHA-256 of a project config found by the default search, as it was loaded; None for a
    # file named by --config or $MCPSYNC_CONFIG (those are never asked about).
    _project_digest: str | None = None
    _trusted: bool = False
    # One stderr line per server of the config that failed (to start, or to answer) in a
    # command over every server; any makes the command end with exit 3.
    failures: list[str] = field(default_factory=list)
    all_servers: bool = False   # the command runs over every server of the config
    answered: int = 0           # how many servers answered the command's question

    def config_path(self) -> str | None:
        """``--config``, else the default search (docs/config.md, "Which file the `mcpsync`
        command reads"); ``None`` when nothing exists."""
        if self.config is not None:
            return self.config
        importlib.import_module("mcpsync.config_files")
        from mcpsync.config_files import default_config_path

        path = default_config_path()
        _log.debug("config file: %s", path or "none found")
        return path

    def configs(self) -> tuple[str | None, list[ServerConfig]]:
        """The config file's path and its servers (``[]`` when there is no file)."""
        if self._loaded is not None:
            return self._loaded
        path = self.config_path()
        if path is None:
            return None, []
        import os

        if not os.path.exists(path):
            raise CLIError(f"config file {path!r} does not exist", EXIT_USAGE)
        importlib.import_module("mcpsync.config_files")
        from mcpsync.config_files import load_config
        importlib.import_module("mcpsync.errors")
        from mcpsync.errors import ConfigError

        project = self.config is None and not os.environ.get("MCPSYNC_CONFIG")
        digest = None
        if project:
            from mcpsync.cli._trust import content_digest

            digest = content_digest(path)
        try:
            # The command is run by a person: a server's first 401 may open a browser.
            loaded = list(load_config(path, interactive_login=True))
        except ConfigError as exc:
            raise CLIError(_describe(exc), EXIT_USAGE) from exc
        except OSError as exc:
            raise CLIError(f"cannot read config file {path!r}: {exc}", EXIT_USAGE) from exc
        if digest is not None and content_digest(path) != digest:
            # What is trusted must be what was loaded.
            raise CLIError(f"{path} changed while it was read; run the command again",
                           EXIT_USAGE)
        self._loaded = (path, loaded)
        self._project_digest = digest
        return self._loaded

    def require_trust(self) -> None:
        """Before a server of the config file starts: a project config found in the current
        directory must be trusted (asked once on a terminal), unless
        ``--trust-project-config`` was given."""
        path, configs = self.configs()
        if path is None or self._project_digest is None or self._trusted \
                or self.trust_project_config:
            return
        from mcpsync.cli._trust import require_trust

        require_trust(path, self._project_digest, configs)
        self._trusted = True

    def with_timeout(self, config: ServerConfig) -> ServerConfig:
        """The config with ``--timeout`` applied (handshake and per-request), if given."""
        if self.timeout is None:
            return config
        import dataclasses

        return dataclasses.replace(config, timeout=self.timeout)
