"""Micro-benchmark of what the Manager and mcpauth add to a call (not a test).

Prints microseconds per ``echo`` tool call on the demo server through a bare ``Client``,
through a ``Manager`` (routing and state lookups), and through a ``Manager`` with a policy
(allow, budget and approve on every call); then the cost of ``OAuthProvider.headers()`` with
a cached token, which mcpsync calls before every HTTP request; and the import times.
Run: ``.venv/bin/python benchmarks/bench_layers.py`` on a quiet machine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable

import mcpsync
from mcpsync import Manager, Policy, ServerConfig

ARGV = [sys.executable, "-m", "mcpsync.demo"]
CALLS = 3000
RUNS = 5


def _per_call_us(call: Callable[[], object]) -> float:
    for _ in range(200):
        call()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - start) / CALLS * 1e6


def _report(label: str, runs: list[float]) -> None:
    print(f"{label:<22} median {statistics.median(runs):7.1f} us/call   "
          f"runs {[round(r, 1) for r in runs]}")


def _import_ms(module: str) -> float:
    code = (f"import time; t = time.perf_counter(); import {module}; "
            f"print((time.perf_counter() - t) * 1000)")
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout) for _ in range(RUNS)]
    return statistics.median(runs)


def main() -> None:
    args = {"text": "x"}
    with mcpsync.connect(ARGV) as client:
        _report("Client.call_tool", [_per_call_us(lambda: client.call_tool("echo", args))
                                     for _ in range(RUNS)])
    with Manager() as manager:
        manager.start_server(ServerConfig(id="demo", command=ARGV[0], args=ARGV[1:]))
        _report("Manager.call_tool", [_per_call_us(
            lambda: manager.call_tool("demo", "echo", args)) for _ in range(RUNS)])
        manager.set_policy(Policy(allow=lambda s, t, a: True, approve=lambda s, t, a: True,
                                  budgets={"demo": 10**9, "demo/echo": 10**9}))
        _report("  ... with a policy", [_per_call_us(
            lambda: manager.call_tool("demo", "echo", args)) for _ in range(RUNS)])

    from mcpauth import MemoryTokenStore, OAuthProvider, Token
    from mcpauth.tokens import credential_key, resource_index_key

    url = "https://mcp.example/mcp"
    store = MemoryTokenStore()
    provider = OAuthProvider(url, store=store, client_id="bench", interactive=False)
    token = Token(access_token="at-bench", expires_at=time.time() + 3600,
                  issued_at=time.time(), issuer="https://as.example", client_id="bench",
                  resource=url)
    store.put(credential_key(token.issuer, token.client_id, token.resource), token.to_dict())
    store.put(resource_index_key(url), {"issuer": token.issuer, "client_id": "bench",
                                        "resource": url})
    headers = provider.headers("POST", url)
    if headers:
        per = min(timeit.repeat(lambda: provider.headers("POST", url), number=100_000,
                                repeat=RUNS)) / 100_000 * 1e6
        print(f"{'OAuthProvider.headers':<22} {per:7.2f} us/request (cached token)")
    else:
        print("OAuthProvider.headers: no cached token picked up; not measured")
    provider.close()
    for module in ("mcpsync", "mcpauth", "mcpauth.provider"):
        print(f"import {module:<17} {_import_ms(module):6.1f} ms (median of {RUNS})")


if __name__ == "__main__":
    main()
