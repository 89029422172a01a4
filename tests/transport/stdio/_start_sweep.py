"""The start of the scripts the start() sweeps run in a fresh interpreter
(``test_stdio_start_pidfd_interrupt``, ``test_stdio_start_recovery_interrupt``): helpers to
list this process's children and descriptors, ``os.killpg`` wrapped to record each signal
and whether the group's leader was still unreaped when it was sent, and the trace set-up
both sweeps need to get opcode events in ``start()`` on every CPython from 3.10 to 3.13
(the names of the call opcodes, and a global trace function that traces one code object
by opcode). Shared so that a sweep cannot lose its events on one version while the other
keeps them: each setting below made a sweep there skip, or see only part of ``start()``.
The first two parts (``PROC``, ``KILLPG_RECORDED``) also start the by-pid loading checks'
scripts (``test_stdio_by_pid_loading``), so that a fix to one reaches them all.

A sweep that got no opcode event at all (a Python whose tracing does not give them in
``start()``) has swept nothing: it skips on a developer's machine and fails under
``CI=true`` (:func:`require_opcode_events`), as the pidfd tests do where pidfds are refused,
so that a CI run cannot pass by sweeping nothing."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest
from helpers import IN_CI

# This process's unreaped children and open descriptors, from /proc (needs os).
PROC = r'''
def children():
    found = set()
    for task in os.listdir('/proc/self/task'):
        try:
            with open(f'/proc/self/task/{task}/children') as f:
                found |= set(f.read().split())
        except FileNotFoundError:   # a thread that ended since the listing
            continue
    return found
def fds():
    return set(os.listdir('/proc/self/fd'))
'''

# os.killpg wrapped to record every signal with whether the group's leader was still
# unreaped (needs os and signal).
KILLPG_RECORDED = r'''
sent = []
real_killpg = os.killpg
def killpg(pid, sig):
    # Whether the group's leader was still unreaped ("ours": its pid, and so the group's id,
    # cannot be another process's) or already reaped ("REAPED").
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        sent.append(f'{signal.Signals(sig).name}:ours')
    except ChildProcessError:
        sent.append(f'{signal.Signals(sig).name}:REAPED')
    return real_killpg(pid, sig)
os.killpg = killpg
'''

PRELUDE = ("\nimport dis, errno, json, linecache, os, signal, sys\n" + PROC + KILLPG_RECORDED
           + r'''from mcpsync.transport.stdio import StdioTransport, _lifecycle
assert _lifecycle.pidfds_read_status()   # asked before pidfd_open fails from here on
# The opcodes that call (3.10's CALL_FUNCTION... to 3.13's CALL and CALL_KW): the sweeps
# raise a Ctrl-C at the instruction after one, where CPython raises a pending interrupt.
CALLS = {'CALL', 'CALL_KW', 'CALL_FUNCTION', 'CALL_FUNCTION_KW', 'CALL_FUNCTION_EX',
         'CALL_METHOD'}
# 3.12 sends opcode events only where some frame asked for them before settrace().
here = sys._getframe()
here.f_trace_opcodes = True
here.f_trace_opcodes = False
def tracing(code, local):
    """A global trace function that traces each frame of `code` by opcode with `local`."""
    def trace(frame, event, arg):
        if frame.f_code is code:
            frame.f_trace = local   # 3.13 turns opcode events on only for a traced frame
            frame.f_trace_opcodes = True
            return local
        return None
    return trace
''').rstrip("\n")   # each script goes on with a line of its own


def require_opcode_events(runs: Sequence[dict[str, Any]], sweep: str) -> None:
    """Skip a sweep none of whose runs (each a dict with the ``opcodes`` its trace
    function counted in ``start()``) saw an opcode event, naming what was missing; under
    ``CI=true`` fail instead."""
    if any(run["opcodes"] for run in runs):
        return
    why = (f"{sweep}: no opcode event in start() in its {len(runs)} run(s); this Python's "
           f"({sys.implementation.name} {sys.version.split()[0]}) trace function got "
           "none, so no point of start() was swept")
    if IN_CI:
        pytest.fail(f"{why} (under CI a sweep that sweeps nothing fails)")
    pytest.skip(why)
