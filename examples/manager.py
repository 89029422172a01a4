"""Many servers behind one Manager: a config file, a secret, a policy and the notifications.

Run it with ``python examples/manager.py``. It writes a Claude-Code-style ``.mcp.json`` into
a temporary directory (two copies of the bundled demo server, one given a secret file),
starts both in parallel, lists every tool with server prefixes, routes calls by id, and
shows a policy refusing a call before anything is sent. No ``async`` anywhere.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import mcpsync


class DemoVault:
    """A stand-in secret store: mcpsync renders what it returns into a 0600 file per spawn
    and passes only the file's path to the server, never a value in argv or env."""

    def resolve(self, ref: str) -> Mapping[str, str]:
        return {"API_TOKEN": f"value-of-{ref}"}


def ask_a_human(server_id: str, tool: str, args: Mapping[str, object]) -> bool:
    """The approval hook runs on the caller's thread and may block while a person decides;
    here it approves everything but ``slow`` on the vaulted server."""
    return not (server_id == "vaulted" and tool == "slow")


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        config_file = Path(folder) / ".mcp.json"
        config_file.write_text(json.dumps({"mcpServers": {
            "demo": {"command": sys.executable, "args": ["-m", "mcpsync.demo"]},
            "vaulted": {"command": sys.executable, "args": ["-m", "mcpsync.demo"],
                        "env": {"DEMO_SECRET_FILE": "{{secret_file}}",
                                "GREETING": "${GREETING:-hello}"},
                        "secret_ref": "vault:demo"},
        }}))

        policy = mcpsync.Policy(allow=lambda server, tool, args: tool != "fail",
                                approve=ask_a_human, budgets={"vaulted/echo": 2})
        notes: list[mcpsync.Notification] = []
        with mcpsync.Manager.from_config(config_file, secret_resolver=DemoVault(),
                                         policy=policy,
                                         connect_options={"log_level": "info"}) as manager:
            manager.set_notification_handler(notes.append)
            print("started:", {sid: err is None for sid, err in manager.start_all().items()})
            manager.list_tools("demo")            # wait for both background discoveries
            manager.list_tools("vaulted")
            print("tools:", [tool.name for tool in manager.tools(prefixed=True)])

            server_id, tool = manager.resolve_tool("vaulted__echo")
            print("echo ->", manager.call_tool(server_id, tool, {"text": "hi"}).text)
            print("add  ->", manager.call_tool("demo", "add", {"a": 2, "b": 3}).structured)
            for server, tool, args in (
                    ("demo", "fail", {}), ("vaulted", "slow", {"seconds": 0.1}),
                    ("vaulted", "echo", {"text": "2"}), ("vaulted", "echo", {"text": "3"}),
                    ("demo", "slow", {"seconds": 0.1, "steps": 2})):
                try:
                    manager.call_tool(server, tool, args)
                    print(f"{server}/{tool} -> sent")
                except mcpsync.PolicyRefused as exc:
                    print(f"{server}/{tool} -> refused locally ({type(exc).__name__}, "
                          f"gateway code {exc.gateway_code})")
            # Notifications run on each server's dispatcher thread: give them a moment.
            deadline = time.monotonic() + 5
            while len(notes) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            print("server log messages:", [(n.server_id, n.text) for n in notes
                                           if n.method == "notifications/message"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
