"""The MCP gateway: one MCP server in front of several upstream servers."""
