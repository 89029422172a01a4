"""A single Ctrl-C during ``start()`` after the spawn returned: the server has its pidfd.

On a machine whose pidfds work, a server's status is read through its pidfd, and only the
close reaps it, after the last signal to its group. A server without one (and without the
by-pid module, which such a machine never loads) is waited for by the close with
``Popen.wait()``, which reaps, and its group is sent the leftovers' ``SIGKILL`` after that:
by a pid that may be another process's by then. So no Ctrl-C may land between the spawn's
return and the pidfd's opening. These tests raise one Ctrl-C at each point of ``start()``
where a call returns after the spawn returned (the instruction after it, where CPython
raises a pending interrupt; a call of a type such as ``map()`` included, which a profile
hook's ``c_return`` does not report, so a trace function on opcodes is used), in a fresh
interpreter, then close the transport, with every ``killpg`` recorded along with whether
the group's leader was still unreaped. When the pidfd was opened after the three pipes'
``fileno()`` calls, by a ``map()`` built there, the interrupt at any of those four returns
left the server without a pidfd, and the close signalled its reaped pid; the opening
iterator is built before the spawn now, and read right after the pid is stored.

A server whose pidfd could not be opened (``EMFILE``, say) has its status read by pid, by a
module loaded right after that failure: a Ctrl-C between the two would leave it with
neither, just the same. The second test makes every ``pidfd_open`` fail and sweeps again,
with the module unloaded before each run: the load comes before the ``fileno()`` calls.

The spawn's own return is not swept: CPython 3.11 and later do not check for a pending
interrupt where a Python function returns into its caller (3.10 does; see
``docs/processes.md``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import mcpsync

from ._start_sweep import PRELUDE, require_opcode_events

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.needs_pidfds(reads_status=True)]

SWEEP = PRELUDE + r'''
mode = sys.argv[1]   # 'pidfd': the server gets its pidfd; 'emfile': pidfd_open fails
def pidfd_open(pid, flags=0):
    raise OSError(errno.EMFILE, 'Too many open files')
if mode == 'emfile':
    os.pidfd_open = pidfd_open
name = 'mcpsync.transport.stdio._by_pid'
START = _lifecycle.ProcessLifecycle.start.__code__
# Where a call made by start() returned normally: the instruction after it, where CPython
# raises a pending KeyboardInterrupt (a call of a type, map() say, included, which a profile
# hook's c_return does not report). Only after the spawn's result is stored in `proc`: the
# spawn's own return is not a point where 3.11 and later raise one.
INSTRUCTIONS = list(dis.get_instructions(START))
OPS = {i.offset: i.opname for i in INSTRUCTIONS}
SPAWNED = min(i.offset for i in INSTRUCTIONS
              if i.opname in ('STORE_FAST', 'STORE_DEREF') and i.argval == 'proc')
before = fds()
for nth in range(80):
    sent.clear()
    state = {'count': 0, 'at': None, 'prev': None, 'opcodes': 0}
    def local(frame, event, arg):
        if event == 'exception':
            state['prev'] = None
        elif event == 'opcode':
            state['opcodes'] += 1
            if (state['prev'] in CALLS and frame.f_lasti > SPAWNED
                    and state['at'] is None):
                if state['count'] == nth:
                    state['at'] = linecache.getline(frame.f_code.co_filename,
                                                    frame.f_lineno).strip()[:70]
                    raise KeyboardInterrupt
                state['count'] += 1
            state['prev'] = OPS.get(frame.f_lasti)
        return local
    # Each run as in a new process: the by-pid module not loaded (it loads once, for good).
    sys.modules.pop(name, None)
    _lifecycle._by_pid = None
    t = StdioTransport(['sh', '-c', 'sleep 30'], name='swept')
    t.hurry()   # no stdin grace: the server ignores its EOF
    sys.settrace(tracing(START, local))
    try:
        t.start()
        outcome = 'started'
    except KeyboardInterrupt:
        outcome = 'KeyboardInterrupt'
    finally:
        sys.settrace(None)
    pidfd = t._pidfd >= 0
    t.close()
    print(json.dumps({'nth': nth, 'at': state['at'], 'outcome': outcome, 'pidfd': pidfd,
                      'status': t.returncode(), 'sent': list(sent),
                      'children': len(children()), 'loaded': name in sys.modules,
                      'opcodes': state['opcodes']}))
    if state['at'] is None:
        break   # nth is past the last C call's return: the sweep is done
print(json.dumps({'fds': sorted(fds() - before)}))
'''


def _sweep(mode: str) -> list[dict[str, Any]]:
    """The sweep's runs (one per point, and a last one without a Ctrl-C), each checked for
    what holds in both modes: no signal to a reaped pid, the server ended, no child and no
    descriptor left."""
    root = Path(mcpsync.__file__).parents[1]   # this tree's package, in the child too
    done = subprocess.run([sys.executable, "-c", SWEEP, mode], capture_output=True,
                          text=True, check=False, timeout=100, cwd=root)
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    runs, end = lines[:-1], lines[-1]
    require_opcode_events(runs, f"the pidfd sweep ({mode})")
    for run in runs:
        assert not any(sent.endswith(":REAPED") for sent in run["sent"]), run
        assert run["status"] in (-signal.SIGTERM, -signal.SIGKILL), run
        assert run["children"] == 0, run
        assert run["outcome"] == ("KeyboardInterrupt" if run["at"] else "started"), run
    assert runs[-1]["at"] is None
    swept = [run["at"] for run in runs if run["at"]]
    for pipe in ("stdin", "stdout", "stderr"):   # where the window was
        assert any(f"proc.{pipe}.fileno()" in at for at in swept), swept
    assert end == {"fds": []}
    return runs


def test_a_ctrl_c_after_the_spawn_never_leaves_the_server_without_its_pidfd() -> None:
    """After each interrupt (and without one, at the sweep's end): the server has its pidfd,
    the close sent ``SIGTERM`` and then the leftovers' ``SIGKILL`` while the leader was
    unreaped, the server ended by the ``SIGTERM``, and the by-pid module is not loaded."""
    for run in _sweep("pidfd"):
        assert run["pidfd"] and not run["loaded"], run
        assert run["sent"] == ["SIGTERM:ours", "SIGKILL:ours"], run
        assert run["status"] == -signal.SIGTERM, run


def test_a_ctrl_c_after_a_failed_pidfd_open_finds_the_by_pid_module() -> None:
    """Every ``pidfd_open`` fails with ``EMFILE``: after each interrupt the by-pid module is
    loaded, and the server was either ended by ``start()`` (a Ctrl-C as the load returned,
    which ``start()`` takes for one that cut it short: ``SIGKILL`` while unreaped, and no
    signal from the close) or closed as usual (``SIGTERM``, then the leftovers' ``SIGKILL``,
    both while unreaped)."""
    runs = _sweep("emfile")
    for run in runs:
        assert not run["pidfd"] and run["loaded"], run
        if run["at"] is not None and "_load_by_pid()" in run["at"]:
            assert run["sent"] == ["SIGKILL:ours"], run
            assert run["status"] == -signal.SIGKILL, run
        else:
            assert run["sent"] == ["SIGTERM:ours", "SIGKILL:ours"], run
            assert run["status"] == -signal.SIGTERM, run
    assert any(run["at"] and "_load_by_pid()" in run["at"] for run in runs), runs
