"""The MCP gateway: one front for many servers, with a redacted traffic log."""
