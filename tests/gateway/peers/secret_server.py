"""A stdio server that reports what it got of its secret, never the secret itself.

The gateway hands it a secret file as the Manager does: the file's path in ``$SECRET_FILE``
(the config's ``{{secret_file}}``). The ``seen`` tool answers with the file's path and mode,
its process ids, and a SHA-256 of the ``API_KEY`` it read, so the test can check the value
arrived while the value itself never crosses the gateway (nor reaches its log).
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any

from mcpsync.server import Server

server = Server("secret-peer", "1.0")


def _read_env_file(path: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            if key:
                pairs[key] = value   # the test's values are bare: no quotes to undo
    return pairs


@server.tool()
def seen() -> dict[str, Any]:
    """What this process received of its secret."""
    path = os.environ.get("SECRET_FILE", "")
    pairs = _read_env_file(path) if path and os.path.exists(path) else {}
    return {"path": path, "mode": stat.S_IMODE(os.stat(path).st_mode) if pairs else None,
            "keys": sorted(pairs), "pid": os.getpid(), "ppid": os.getppid(),
            "api_key_sha256": hashlib.sha256(pairs.get("API_KEY", "").encode()).hexdigest()}


if __name__ == "__main__":
    server.run()
