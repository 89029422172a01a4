"""Tests of the core layers: JSON-RPC messages, framing, MCP types, protocol decisions, errors."""
