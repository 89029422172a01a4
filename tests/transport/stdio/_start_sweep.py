"""The start of the scripts the start() sweeps run in a fresh interpreter
(``test_stdio_start_pidfd_interrupt``, ``test_stdio_start_recovery_interrupt``): helpers to
list this process's children and descriptors, and ``os.killpg`` wrapped to record each
signal and whether the group's leader was still unreaped when it was sent."""

PRELUDE = r'''
import dis, errno, json, linecache, os, signal, sys
def children():
    found = set()
    for task in os.listdir('/proc/self/task'):
        with open(f'/proc/self/task/{task}/children') as f:
            found |= set(f.read().split())
    return found
def fds():
    return set(os.listdir('/proc/self/fd'))
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
from mcpsync.transport.stdio import StdioTransport, _lifecycle
assert _lifecycle.pidfds_read_status()   # asked before pidfd_open fails from here on
'''.rstrip("\n")   # each script goes on with a line of its own
