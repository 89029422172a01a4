"""A Ctrl-C that stops the first import of a module the client loads on first use.

Two faults are checked, each in a fresh interpreter (the modules must not be loaded yet):

- another thread that waited on the module lock meanwhile must load the module itself and go
  on: a bare ``from module import name`` would read the name from the failed, half-built
  module and raise ``ImportError`` (the loaders call ``load_module`` first);
- a 2026-07-28 server that already created a task when the first task's code starts to load
  must get ``tasks/cancel`` for it, as a Ctrl-C in the task's wait sends: otherwise the task
  runs on and the caller never saw its id.

The interrupt is raised by a trace function in the main thread when the module's body starts
to run (its first ``call`` event), after a pause in which the other thread asks for the same
module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import first_import_interrupted

TASKS_PEER = Path(__file__).with_name("peers") / "tasks_server.py"

# An in-process server (it loads none of the modules below) and a client connected to it.
_SETUP = """\
import mcpsync, mcpsync.jsonrpc
from mcpsync.config import ServerConfig
ServerConfig(url='https://h/x')   # loads the HTTP checks, not the auth hooks
server = mcpsync.Server('lazy', '1')

@server.tool()
def echo(text: str) -> str:
    return text

client = mcpsync.connect(server)

def failing(call):
    try:
        call()
    except mcpsync.MCPError as exc:
        return type(exc).__name__
    return 'no error'
"""

# No client: for the modules that connecting loads.
_BARE = "import mcpsync, mcpsync.jsonrpc, mcpsync.types\nclient = None\n"

# No client either, and what the connect, config and Manager cases below call. REFUSED is a
# bound port that does not listen: an HTTP connect to it loads the HTTP transport and fails.
_UNCONNECTED = _BARE + f"""\
import socket, sys
from mcpsync.manager import Manager
_closed = socket.socket()
_closed.bind(('127.0.0.1', 0))
REFUSED = 'http://127.0.0.1:%d/mcp' % _closed.getsockname()[1]
PEER = [sys.executable, {str(TASKS_PEER)!r}, 'stdio']

def echo_server():   # made on use: making a Server loads the HTTP transport
    server = mcpsync.Server('lazy', '1')

    @server.tool()
    def echo(text: str) -> str:
        return text
    return server

def served(target, tool, **options):
    c = mcpsync.connect(target, **options)
    try:
        return c.call_tool(tool, {{'text': 'x'}}).text
    finally:
        c.close()

def failing(call):
    try:
        call()
    except mcpsync.MCPError as exc:
        return type(exc).__name__
    return 'no error'

def oauth_kind():
    from mcpsync.config_files import load_config
    entry = {{'url': 'https://mcp.example.com/mcp', 'oauth': {{'clientId': 'cid',
             'authServerMetadataUrl': 'https://as.example.com/.well-known/oauth'}}}}
    return type(load_config({{'mcpServers': {{'srv': entry}}}})[0].auth).__name__

def manager_kind():
    manager = Manager.from_config({{'mcpServers': {{}}}})
    try:
        return type(manager).__name__
    finally:
        manager.close()
"""

# case -> the module and what first loads it (an expression whose value both threads print),
# and the setup when it is not _SETUP
_FIRST_USES: dict[str, tuple[str, ...]] = {
    "client-more": ("mcpsync.client._client_more", "repr(client.set_log_level('info'))"),
    "tasks": ("mcpsync.client._tasks", "failing(lambda: client.resume_task('no-such'))"),
    "progress-bar": ("mcpsync.client._progress",
                     "client.call_tool('echo', {'text': 'x'}, progress=False).text + "
                     "client.call_tool('echo', {'text': 'y'}, progress=True).text"),
    "progress-submitted": ("mcpsync.client._progress",
                           "client.submit_tool('echo', {'text': 'x'}, progress=True)"
                           ".result(10).text"),
    "proxies": ("mcpsync.client._proxies", "client.tools.echo(text='x').text"),
    "display-list": ("mcpsync._display", "str(len(client.list_tools()))"),
    "display-repr": ("mcpsync._display",
                     "repr(client.call_tool('echo', {'text': 'x'}).content[0])"),
    "skills": ("mcpsync.client._skills", "failing(client.list_skills)"),
    "subscribing": ("mcpsync.client._subscribing",
                    "type(client.on_list_changed('tools', print)).__name__"),
    "auth-hooks": ("mcpsync.auth_hooks",
                   "ServerConfig(url='https://h/x', auth='tok').url"),
    "jsonscan": ("mcpsync._jsonscan",
                 "str(len(mcpsync.jsonrpc.parse('[{\"jsonrpc\":\"2.0\",\"method\":\"a\"}]', "
                 "allow_batch=True)))"),
    "connect-config": ("mcpsync.client._connect_config",
                       "failing(lambda: mcpsync.connect({'mcpServers': {}}, server_id='x'))"),
    "config-files": ("mcpsync.config_files",
                     "failing(lambda: mcpsync.connect({'mcpServers': {}}, server_id='x'))"),
    # (module, use, setup): the cases that need no client connected first
    "memory": ("mcpsync.client._memory", "served(echo_server(), 'echo')", _UNCONNECTED),
    "stderr-show": ("mcpsync.client._stderr_show", "served(PEER, 'plain', stderr='show')",
                    _UNCONNECTED),
    "transport-http": ("mcpsync.transport.http",
                       "failing(lambda: mcpsync.connect(REFUSED))", _UNCONNECTED),
    "origin": ("mcpsync._origin", "oauth_kind()", _UNCONNECTED),
    "manager-config-files": ("mcpsync.config_files", "manager_kind()", _UNCONNECTED),
    # call_tool's argument checks, for a name the cached tool list does not hold
    "arguments": ("mcpsync.client._arguments",
                  "failing(lambda: client.call_tool('nope', {}))",
                  _SETUP + "client.list_tools()\n"),
    # the stdout pump of pipes that cannot be poll()-ed (Windows; forced here)
    "stdout-pump": ("mcpsync.transport.stdio._pump", "served(PEER, 'plain')",
                    _UNCONNECTED + "import mcpsync.transport.stdio._lifecycle as lifecycle\n"
                                   "lifecycle._USE_POLL = False\n"),
    # the exit read by pid, loaded by start() where pidfds cannot read it (forced here)
    "by-pid": ("mcpsync.transport.stdio._by_pid", "served(PEER, 'plain')",
               _UNCONNECTED + "import mcpsync.transport.stdio._lifecycle as lifecycle\n"
                              "lifecycle._pidfd_peeks = False\n"),
    # a command given as one string (an argv list never loads shlex)
    "shlex": ("shlex", "served(' '.join(\"'\" + a + \"'\" for a in PEER), 'plain')",
              _UNCONNECTED),
}


def _interrupted_while_another_waits(module: str, use: str, setup: str = _SETUP) -> list[str]:
    return first_import_interrupted(
        module, use, f"{setup}\nimport sys\nassert {module!r} not in sys.modules",
        after="if client is not None:\n    client.close()")


@pytest.mark.parametrize("case", sorted(_FIRST_USES))
def test_a_thread_waiting_on_a_lazy_client_module_that_a_ctrl_c_stopped_loads_it(
        case: str) -> None:
    module, use, *setup = _FIRST_USES[case]
    out = _interrupted_while_another_waits(module, use, *setup)
    assert out[0] == "interrupted", out
    assert "Error(" not in out[1] and out[1] == repr([out[2]]), out


# A legacy server that answers the tool "gated" with a gateway's refusal code (-32011).
_GATED_SERVER = r"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    rid = msg.get("id")
    if rid is None:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "serverInfo": {"name": "gated", "version": "1"},
                  "capabilities": {"tools": {}}}
        answer = {"jsonrpc": "2.0", "id": rid, "result": result}
    elif msg["method"] == "tools/call":
        answer = {"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32011, "message": "approval rejected"}}
    else:
        answer = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


def test_a_thread_waiting_on_the_gateway_refusal_module_that_a_ctrl_c_stopped_loads_it(
        tmp_path: Path) -> None:
    # The client loads it for the first error answer of a gateway=True server.
    server = tmp_path / "gated_server.py"
    server.write_text(_GATED_SERVER, encoding="utf-8")
    setup = _BARE + (
        "import sys\n"
        "from mcpsync.config import ServerConfig\n"
        f"client = mcpsync.connect(ServerConfig(command=sys.executable, args=[{str(server)!r}],\n"
        "                                      gateway=True))\n"
        "def failing(call):\n"
        "    try:\n"
        "        call()\n"
        "    except mcpsync.MCPError as exc:\n"
        "        return type(exc).__name__\n"
        "    return 'no error'\n")
    out = _interrupted_while_another_waits(
        "mcpsync._gateway_refusal", "failing(lambda: client.call_tool('gated', {}))", setup)
    assert out[0] == "interrupted", out
    assert out[1:3] == ["['ApprovalRejected']", "ApprovalRejected"], out


@pytest.mark.parametrize(("module", "use"), [
    ("mcpsync._types_more", "mcpsync.types.Resource.__name__"),
    ("mcpsync._frame_io", "mcpsync.jsonrpc.FrameReader.__name__"),
])
def test_a_thread_waiting_on_a_lazy_data_module_that_a_ctrl_c_stopped_loads_it(
        module: str, use: str) -> None:
    # The types and frame I/O that a connection loads, in an interpreter that has not.
    out = _interrupted_while_another_waits(module, use, _BARE)
    assert out[0] == "interrupted", out
    assert "Error(" not in out[1] and out[1] == repr([out[2]]), out


# A server and a gateway embedded in a program: what their first uses load. A Server loads
# its context's asks, its skills and its HTTP module when it is made, and the gateway package
# its HTTP upstream's modules, so those loaders are guarded but cannot be reached here.
_EMBEDDED = _BARE + """\
import sys
from mcpsync.gateway import Gateway
from mcpsync.gateway._guard._approval import approver_from_config
mcpsync.Server('lazy', '1')   # what making a server loads

def front_kind():
    gateway = Gateway({'mcpServers': {'s': {'command': sys.executable, 'args': ['-c', '']}}})
    try:
        app = gateway.wsgi_app()   # no server is started before a host connects
        app.close()
        return type(app).__name__
    finally:
        gateway.close()
"""


@pytest.mark.parametrize(("module", "use"), [
    # one server each: a server's sealer is made under its lock, which would serialise them
    ("mcpsync.server._state", "type(mcpsync.Server('lazy', '1')._make_sealer()).__name__"),
    ("mcpsync.gateway._front", "front_kind()"),
    ("mcpsync.gateway._guard._approvers._config", "repr(approver_from_config({}, 'test'))"),
])
def test_a_thread_waiting_on_a_lazy_server_or_gateway_module_that_a_ctrl_c_stopped_loads_it(
        module: str, use: str) -> None:
    out = _interrupted_while_another_waits(module, use, _EMBEDDED)
    assert out[0] == "interrupted", out
    assert "Error(" not in out[1] and out[1] == repr([out[2]]), out


def test_a_wrong_progress_value_after_a_ctrl_c_in_its_check_is_still_refused() -> None:
    # Client._call loads _progress only to refuse a wrong progress= value of a bare request.
    setup = _SETUP + ("def refused():\n"
                      "    try:\n"
                      "        client._request('tools/list', progress=5)\n"
                      "    except TypeError:\n"
                      "        return 'TypeError'\n"
                      "    return 'accepted'\n")
    out = _interrupted_while_another_waits("mcpsync.client._progress", "refused()", setup)
    assert out[0] == "interrupted", out
    assert out[1:3] == ["['TypeError']", "TypeError"], out


@pytest.mark.parametrize("module", ["mcpsync.client._client_more", "mcpsync.client._tasks"])
def test_a_ctrl_c_while_the_first_task_loads_cancels_the_task_the_server_made(
        module: str, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    probe = ("import sys, mcpsync\n"
             f"client = mcpsync.connect([sys.executable, {str(TASKS_PEER)!r}, 'stdio'],\n"
             f"                         env={{'TASKS_LOG': {str(log)!r}}})\n"
             f"assert {module!r} not in sys.modules\n"
             "def trace(frame, event, arg):\n"
             f"    if event == 'call' and frame.f_globals.get('__name__') == {module!r}:\n"
             "        sys.settrace(None)\n"
             "        raise KeyboardInterrupt\n"
             "sys.settrace(trace)\n"
             "try:\n"
             "    client.call_tool('slow', {'polls': 1000})\n"
             "except KeyboardInterrupt:\n"
             "    print('interrupted')\n"
             "finally:\n"
             "    sys.settrace(None)\n"
             "print(client.call_tool('slow', {'polls': 1}).text)\n"
             "client.close()\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.split() == ["interrupted", "done"], done.stdout
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    cancels = [e["taskId"] for e in entries if e["method"] == "tasks/cancel"]
    # The first task (the interrupted one) is cancelled; the second ran to its end.
    assert len(cancels) == 1 and cancels[0], entries
    assert [e["method"] for e in entries].count("tools/call") == 2


def test_the_clients_copies_of_the_task_constants_match_the_task_module() -> None:
    # Client._cancel_created cancels a created task without loading _tasks: its end states
    # and its bound must stay those of TaskHandle.cancel.
    from mcpsync.client import _client, _tasks

    assert _client._TASK_ENDS == _tasks.TERMINAL
    assert _client._TASK_CANCEL_TIMEOUT == _tasks._CANCEL_TIMEOUT


def test_dir_lists_the_names_that_moved_out_of_the_client_import() -> None:
    from mcpsync import _threads
    from mcpsync.client import _callbacks
    from mcpsync.transport.stdio import _lifecycle

    assert "run_parallel" in dir(_threads)
    assert {"apply_schema_defaults", "SamplingRequest", "ElicitationRequest"} <= set(
        dir(_callbacks))
    assert {"ExitWatch", "_Watched"} <= set(dir(_lifecycle))
