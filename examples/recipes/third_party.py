"""List (and try) the tools of a server published on npm or PyPI, started by its launcher.

``npx -y PACKAGE`` runs an npm package (downloading it the first time), ``uvx PACKAGE`` a PyPI
one in a throwaway environment. To mcpsync either is just a command that speaks MCP on
stdin/stdout::

    python third_party.py npx -y @modelcontextprotocol/server-everything
    python third_party.py uvx mcp-server-time
"""

from __future__ import annotations

import os
import sys

import mcpsync

# A server gets a small, safe environment (PATH, HOME, LANG, ...), not all of yours. A
# launcher that downloads needs your proxy, CA and registry settings: pass those on.
NETWORK_SETTINGS = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy",
                    "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")


def launcher_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items()
            if key in NETWORK_SETTINGS or key.startswith(("npm_config_", "UV_"))}


def main(command: list[str]) -> None:
    # The first run of npx or uvx downloads the package: give the start more time.
    with mcpsync.connect(command, name=command[0], env=launcher_env(), timeout=120) as client:
        tools = client.list_tools()
        print(f"{client.server_info.name}: {len(tools)} tools")
        for tool in tools:
            print(f"  {tool.name}: {(tool.description or '').splitlines()[0][:60]}")
        if any(tool.name == "echo" for tool in tools):
            schema = next(t.input_schema for t in tools if t.name == "echo")
            field = next(iter(schema.get("properties", {"message": {}})))
            print("echo ->", client.call_tool("echo", {field: "hello"}).text)


if __name__ == "__main__":
    main(sys.argv[1:] or ["npx", "-y", "@modelcontextprotocol/server-everything"])
