"""Log in to an OAuth-protected MCP server from a machine with no browser, then call a tool.

``python oauth_headless.py URL device`` shows a code to type on any other device (phone,
laptop) and waits; ``python oauth_headless.py URL paste`` shows the authorization URL to open
in any browser and reads back the address the browser ended on (a ``127.0.0.1`` page that
fails to load: its URL carries the code). The token goes to the token file
(``~/.config/mcpauth/tokens.json``, 0600), so the next run logs in no more: it uses the token,
and refreshes it when it expires.
"""

from __future__ import annotations

import sys

import mcpauth
import mcpsync

REDIRECT = "http://127.0.0.1:8765/callback"   # nothing listens: the address is pasted back


def show_code(info: mcpauth.DeviceCode) -> None:
    print(f"On any device, open {info.verification_uri} and enter the code {info.user_code}",
          flush=True)


def paste_redirect(url: str) -> str:
    print(f"Open this address in a browser on any machine:\n{url}", flush=True)
    return input("Then paste the address the browser ended on: ").strip()


def provider(url: str, how: str) -> mcpauth.OAuthProvider:
    store = mcpauth.FileTokenStore()
    if how == "device":
        return mcpauth.OAuthProvider(url, store=store, grant="device_code",
                                     device_code_handler=show_code)
    return mcpauth.OAuthProvider(url, store=store, redirect_uri=REDIRECT,
                                 authorization_handler=paste_redirect)


def main(url: str, how: str) -> None:
    auth = provider(url, how)
    try:
        with mcpsync.connect(url, auth=auth, timeout=30) as client:   # logs in if needed
            print("tools:", ", ".join(tool.name for tool in client.list_tools()))
            print("echo:", client.call_tool("echo", {"text": "from a headless machine"}).text)
    finally:
        auth.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "device")
