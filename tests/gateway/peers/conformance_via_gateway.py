"""The conformance client, reaching the suite's mock server through the gateway.

The suite runs ``python conformance_via_gateway.py <server url>``. This writes a gateway
config naming that URL as the one HTTP upstream, then runs ``tests/conformance/client.py``
with ``MCPSYNC_CONFORMANCE_STDIO`` set to the ``mcpsync gateway --config`` command, so the
client speaks stdio to the gateway and the gateway speaks Streamable HTTP to the mock.
With ``MCPSYNC_GATEWAY_CONFORMANCE_LOG`` set, the gateway logs its traffic there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "conformance" / "client.py"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: conformance_via_gateway.py <server-url>", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mcpsync-gw-conf-") as tmp:
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"mcpServers": {"mock": {"url": argv[1]}}}))
        gateway = [sys.executable, "-m", "mcpsync", "gateway", "--config", str(config)]
        log = os.environ.get("MCPSYNC_GATEWAY_CONFORMANCE_LOG")
        if log:   # the test reads it to see that the calls went through the gateway
            gateway += ["--log", log]
        env = {**os.environ, "MCPSYNC_CONFORMANCE_STDIO": json.dumps(gateway)}
        return subprocess.run([sys.executable, str(CLIENT), argv[1]], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
