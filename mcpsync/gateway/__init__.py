"""The MCP gateway: one MCP server in front of several upstream servers, with a redacted
traffic log."""
