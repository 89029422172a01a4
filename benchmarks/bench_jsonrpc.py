"""Micro-benchmark of the JSON-RPC wire layer's hot path (not a test).

Prints microseconds per ``parse`` of a typical small ``tools/call`` response and per
``serialize`` of a typical ``tools/call`` request, next to the bare ``json`` calls they wrap,
so the wire layer's own overhead is visible. Run: ``.venv/bin/python benchmarks/bench_jsonrpc.py``.
"""

from __future__ import annotations

import json
import timeit

from mcpsync import jsonrpc

RESPONSE = (
    b'{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"3"}],'
    b'"structuredContent":{"sum":3},"isError":false}}'
)
RESPONSE_STR_ID = RESPONSE.replace(b'"id":42', b'"id":"req-42"')
# The slow path: a string id in a line holding escapes costs one walk of the top-level members.
BIG_TEXT = "line\\n" * 10_000  # JSON text: an escaped newline
BIG_RESPONSE = ('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}')
BIG_INT_ID = (BIG_RESPONSE % ("42", BIG_TEXT)).encode()
BIG_STR_ID = (BIG_RESPONSE % ('"req-42"', BIG_TEXT)).encode()
REQUEST = jsonrpc.request(
    42, "tools/call",
    {"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": {"progressToken": 42}},
)


def _per_call_us(stmt: object, number: int) -> float:
    timer = timeit.Timer(stmt)  # type: ignore[arg-type]
    best = min(timer.repeat(repeat=5, number=number))
    return best / number * 1e6


def main() -> None:
    n = 100_000
    plain = REQUEST.to_dict()
    # Bound once, as the library's own callers import them: a lookup on the module costs
    # about 11 ns more since it has a module __getattr__ (docs/performance.md).
    parse, serialize = jsonrpc.parse, jsonrpc.serialize
    rows = [
        ("parse: tools/call response, int id",
         _per_call_us(lambda: parse(RESPONSE), n)),
        ("parse: tools/call response, str id",
         _per_call_us(lambda: parse(RESPONSE_STR_ID), n)),
        ("  baseline json.loads(bytes.decode())",
         _per_call_us(lambda: json.loads(RESPONSE.decode()), n)),
        ("parse: 60 KB response with escapes, int id",
         _per_call_us(lambda: parse(BIG_INT_ID), n // 100)),
        ("parse: 60 KB response with escapes, str id",
         _per_call_us(lambda: parse(BIG_STR_ID), n // 100)),
        ("serialize: tools/call request",
         _per_call_us(lambda: serialize(REQUEST), n)),
        ("  baseline json.dumps(compact).encode()",
         _per_call_us(lambda: json.dumps(plain, separators=(",", ":")).encode(), n)),
    ]
    for label, micros in rows:
        print(f"{label:<44} {micros:8.2f} µs")


if __name__ == "__main__":
    main()
