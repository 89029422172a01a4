"""The ``mcpsync`` command (also ``python -m mcpsync``): MCP servers from a shell.

The public face of the room; ``_main`` holds the entry point, and parsing, commands,
output, login and trust each live in their own private module.
"""
from __future__ import annotations

from mcpsync.cli._main import (
    EXIT_AUTH as EXIT_AUTH,
    EXIT_CONNECT as EXIT_CONNECT,
    EXIT_FAILED as EXIT_FAILED,
    EXIT_INTERRUPTED as EXIT_INTERRUPTED,
    EXIT_OK as EXIT_OK,
    EXIT_TIMEOUT as EXIT_TIMEOUT,
    EXIT_USAGE as EXIT_USAGE,
    CLIError as CLIError,
    build_parser as build_parser,
    convert_arguments as convert_arguments,
    convert_value as convert_value,
    exit_code_for as exit_code_for,
    main as main,
)

__all__ = [
    "EXIT_AUTH",
    "EXIT_CONNECT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "CLIError",
    "build_parser",
    "convert_arguments",
    "convert_value",
    "exit_code_for",
    "main",
]
