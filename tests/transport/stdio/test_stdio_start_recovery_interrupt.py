"""A second Ctrl-C during ``start()``'s recovery from a failed load of the by-pid module.

A server that got no pidfd on a kernel whose pidfds work has its status read by pid, by a
module ``start()`` loads right after the spawn. When that import fails (``EMFILE`` again, or
a Ctrl-C cuts it short), ``start()`` kills the server's group while the server is surely
unreaped and marks that its last signal went out; the close then only reaps it. A second
Ctrl-C must not skip that kill: the close would then reap the server with ``Popen`` and
send its group the leftovers' ``SIGKILL`` after that, by a pid that may be another
process's by then. These tests make the import fail both ways and then raise a second
Ctrl-C at each point of ``start()`` that follows where a call returns (the instruction after
it, where CPython raises a pending interrupt; a call of a type such as ``map()`` included,
which a profile hook's ``c_return`` does not report, so a trace function on opcodes is used),
in a fresh interpreter (the module must not be loaded there), with every ``killpg``
recorded along with whether the group's leader was still unreaped. When the kill's ``map()``
iterators were built in the handler, the interrupt at either construction's return escaped
before the kill, and the close signalled the reaped pid; they are built before the spawn
now, and no call returns between the failure and the kill.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import mcpsync

from ._start_sweep import PRELUDE, require_opcode_events

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.needs_pidfds(reads_status=True)]

SWEEP = PRELUDE + r'''
def pidfd_open(pid, flags=0):
    raise OSError(errno.EMFILE, 'Too many open files')
os.pidfd_open = pidfd_open
first = sys.argv[1]   # how the import fails: 'ctrl-c' or 'emfile'
name = 'mcpsync.transport.stdio._by_pid'
START = _lifecycle.ProcessLifecycle.start.__code__
before = fds()
# Where a call made by start() returned normally (an opcode in the prelude's CALLS): the
# instruction after it, where CPython raises a pending KeyboardInterrupt (a call of a type,
# map() say, included, which a profile hook's c_return does not report). Not after a call
# that raised: the exception goes straight to its handler (Python 3.10 also checks as a
# handler begins; not swept here).
OPS = {i.offset: i.opname for i in dis.get_instructions(START)}
class Failing:
    """Fails the module's import (a trace function that raised would stop tracing)."""
    def find_spec(self, fullname, path, target=None):
        if fullname == name and not state['failed']:
            state['failed'] = True
            if first == 'ctrl-c':
                raise KeyboardInterrupt
            raise OSError(errno.EMFILE, 'Too many open files')
        return None
sys.meta_path.insert(0, Failing())
for nth in range(60):
    sent.clear()
    state = {'failed': False, 'count': 0, 'second': None, 'prev': None, 'opcodes': 0}
    def local(frame, event, arg):
        if event == 'exception':
            state['prev'] = None
        elif event == 'opcode':
            state['opcodes'] += 1
            if (state['prev'] in CALLS and state['failed'] and state['second'] is None):
                if state['count'] == nth:
                    state['second'] = linecache.getline(frame.f_code.co_filename,
                                                        frame.f_lineno).strip()[:70]
                    raise KeyboardInterrupt
                state['count'] += 1
            state['prev'] = OPS.get(frame.f_lasti)
        return local
    t = StdioTransport(['sh', '-c', 'sleep 30'], name='swept')
    sys.settrace(tracing(START, local))
    try:
        t.start()
        outcome = 'started'
    except KeyboardInterrupt:
        outcome = 'KeyboardInterrupt'
    except OSError as exc:
        outcome = 'OSError:' + str(exc.errno)
    finally:
        sys.settrace(None)
    t.close()
    print(json.dumps({'nth': nth, 'second': state['second'], 'outcome': outcome,
                      'status': t.returncode(), 'sent': list(sent),
                      'children': len(children()), 'loaded': name in sys.modules,
                      'opcodes': state['opcodes']}))
    if state['second'] is None:
        break   # nth is past the last C call's return: the sweep is done
print(json.dumps({'fds': sorted(fds() - before)}))
'''


@pytest.mark.parametrize("first", ["ctrl-c", "emfile"])
def test_a_second_ctrl_c_after_the_failed_import_never_skips_the_kill(first: str) -> None:
    """After each interrupt (and without one, at the sweep's end): the server was killed by
    ``start()`` while unreaped (``SIGKILL``, its status -9), the close sent no signal to
    the reaped pid, no child and no descriptor is left, and the module is not loaded. The
    second Ctrl-C landed at least once (the sweep is not empty)."""
    root = Path(mcpsync.__file__).parents[1]   # this tree's package, in the child too
    done = subprocess.run([sys.executable, "-c", SWEEP, first], capture_output=True,
                          text=True, check=False, timeout=100, cwd=root)
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    runs, end = lines[:-1], lines[-1]
    require_opcode_events(runs, f"the recovery sweep ({first} first)")
    assert len(runs) >= 2, runs
    failed_by = "KeyboardInterrupt" if first == "ctrl-c" else "OSError:24"
    for run in runs:
        assert run["sent"] == ["SIGKILL:ours"], run   # start()'s kill, and no other
        assert run["status"] == -signal.SIGKILL, run
        assert run["children"] == 0 and not run["loaded"], run
        # The second Ctrl-C goes to the caller; without one, the import's failure does.
        assert run["outcome"] == ("KeyboardInterrupt" if run["second"] else failed_by), run
    assert runs[-1]["second"] is None
    assert any(run["second"] for run in runs), runs
    assert end == {"fds": []}
