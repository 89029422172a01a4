"""Tests of the HTTP transports (Streamable HTTP, 2024-11-05 HTTP+SSE) on loopback servers."""
