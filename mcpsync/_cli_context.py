"""The parsed global options of one ``mcpsync`` command and the config file they point at.

Every command reads the same few options and at most one config file; one object carries
them, and loads (and checks) the file only when a command asks for it, so commands that do
not need a config never read one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpsync._cli_errors import EXIT_USAGE, CLIError, _describe

if TYPE_CHECKING:
    from mcpsync.config import ServerConfig

# The CLI's modules all log as "mcpsync.cli": --verbose and the quiet warning filter
# (_cli_logging) are set up for that one name.
_log = logging.getLogger("mcpsync.cli")


@dataclass
class _Context:
    """The parsed global options, and the config they point at (loaded on demand)."""

    config: str | None
    timeout: float | None
    json: bool
    _loaded: tuple[str, list[ServerConfig]] | None = None

    def config_path(self) -> str | None:
        """``--config``, else the default search (rules §10); ``None`` when nothing exists."""
        if self.config is not None:
            return self.config
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
        from mcpsync.config_files import load_config
        from mcpsync.errors import ConfigError

        try:
            # The command is run by a person: a server's first 401 may open a browser.
            loaded = list(load_config(path, interactive_login=True))
        except ConfigError as exc:
            raise CLIError(_describe(exc), EXIT_USAGE) from exc
        except OSError as exc:
            raise CLIError(f"cannot read config file {path!r}: {exc}", EXIT_USAGE) from exc
        self._loaded = (path, loaded)
        return self._loaded

    def with_timeout(self, config: ServerConfig) -> ServerConfig:
        """The config with ``--timeout`` applied (handshake and per-request), if given."""
        if self.timeout is None:
            return config
        import dataclasses

        return dataclasses.replace(config, timeout=self.timeout)
