"""Tests of the stdio transport: the child process, its environment, framing on pipes, teardown."""
