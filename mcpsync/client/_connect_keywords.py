"""``ConnectKeywords``: the type of ``connect()``'s ``**overrides``, for the type checker.

Kept out of ``_connect.py`` because only a type checker reads it (and a test that holds it
to ``ClientOptions``): building a ``TypedDict`` turns each of its annotations into a
``typing.ForwardRef``, which compiles the annotation's text, about 0.4 ms at every client
import for nothing a program runs. ``connect()``'s annotation reaches it as
``mcpsync.client._connect_keywords.ConnectKeywords``, a package attribute that loads this
module when read, so ``typing.get_type_hints(connect)`` still resolves it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from mcpsync.client._callbacks import ElicitationCallback, RootsInput, SamplingCallback
from mcpsync.errors import ConnectionLost

__all__ = ["ConnectKeywords"]


class ConnectKeywords(TypedDict, total=False):
    """Every keyword ``connect()`` takes: the fields of ``ClientOptions`` and the per-server
    ones (a test checks that the two lists agree)."""

    # ClientOptions
    timeout: float | None
    max_timeout: float
    reset_timeout_on_progress: bool
    era: str
    protocol_version: str | None
    probe_timeout: float
    max_frame_bytes: int
    inherit_env: bool
    stderr_bytes: int
    on_stderr: Callable[[str], None] | None
    die_with_parent: bool
    restart: str | None
    sampling: SamplingCallback | None
    elicitation: ElicitationCallback | None
    roots: RootsInput | None
    on_log: Callable[[str, str | None, Any], Any] | None
    on_notification: Callable[[str, Any], Any] | None
    notification_observer: Callable[[str, Any], Any] | None
    on_connection_lost: Callable[[ConnectionLost], Any] | None
    log_level: str | None
    client_info: Mapping[str, Any] | bool | None
    max_pages: int
    max_input_rounds: int
    validate_output: bool
    validate_input: bool
    stderr: str | None
    # per server
    name: str | None
    env: Mapping[str, str | None] | Sequence[str] | None
    cwd: str | os.PathLike[str] | None
    transport: str | None
    headers: Mapping[str, str] | None
    auth: Any
    session: Any
    authorization: Callable[[], str | None] | None
    on_unauthorized: Callable[..., Any] | None
