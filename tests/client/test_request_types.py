"""SamplingRequest and ElicitationRequest load on first use, under every name they had.

They are public dataclasses that only a server's sampling or elicitation request builds, so
the client import leaves them (``mcpsync.client._requests``) for later: each name they were
importable as before loads them, pickles naming their old module still load, the callback
aliases still resolve in ``typing.get_type_hints``, and a Ctrl-C while they are being built
is a ``KeyboardInterrupt`` (not the ``RuntimeError`` that ``type()`` wraps it in on 3.10 and
3.11), after which the next access builds them whole. Each probe runs in a fresh interpreter
so that nothing has loaded them yet.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(probe: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_every_name_gives_the_one_class_and_keeps_source_and_pickles() -> None:
    probe = (
        "import copy, dataclasses, inspect, pickle, sys, typing\n"
        "import mcpsync, mcpsync.client\n"
        "assert 'mcpsync.client._requests' not in sys.modules\n"
        "from mcpsync.client._callbacks import SamplingRequest as a, ElicitationRequest as b\n"
        "from mcpsync.client._client import SamplingRequest as c, ElicitationRequest as d\n"
        "import mcpsync.client._requests as r\n"
        "assert a is c is mcpsync.SamplingRequest is mcpsync.client.SamplingRequest"
        " is r.SamplingRequest\n"
        "assert b is d is mcpsync.ElicitationRequest is mcpsync.client.ElicitationRequest"
        " is r.ElicitationRequest\n"
        "ns = {}\n"
        "exec('from mcpsync.client import *', ns)\n"
        "assert ns['SamplingRequest'] is a and ns['ElicitationRequest'] is b\n"
        "assert a.__module__ == 'mcpsync.client._requests'\n"
        "assert 'class SamplingRequest:' in inspect.getsource(a)\n"
        "s = a([], None, None, None, {'messages': []})\n"
        "assert repr(s) == ('SamplingRequest(messages=[], max_tokens=None, '\n"
        "                   'system_prompt=None, tools=None)')\n"
        "e = b('form', 'hi', None, None, None, {})\n"
        "for value in (s, e):\n"
        "    assert pickle.loads(pickle.dumps(value)) == value\n"
        "    assert copy.deepcopy(value) == value == dataclasses.replace(value)\n"
        "old = pickle.dumps(s, protocol=2).replace(b'mcpsync.client._requests',\n"
        "                                          b'mcpsync.client._callbacks')\n"
        "assert b'mcpsync.client._callbacks' in old and pickle.loads(old) == s\n"
        "hints = typing.get_type_hints(mcpsync.ClientOptions)\n"
        "for key, cls in (('sampling', a), ('elicitation', b)):\n"
        "    alias = typing.get_args(hints[key])[0]\n"
        "    assert typing.get_origin(alias) is __import__('collections.abc').abc.Callable\n"
        "    assert typing.get_args(alias)[0] == [cls], alias\n"
        "print('ok')\n")
    assert _run(probe) == ["ok"]


def test_unknown_names_still_raise_attribute_error() -> None:
    import mcpsync.client
    import mcpsync.client._callbacks as callbacks
    import mcpsync.client._client as client

    for module in (mcpsync.client, callbacks, client):
        with pytest.raises(AttributeError, match="no attribute 'Nope'"):
            module.Nope  # noqa: B018


@pytest.mark.parametrize("how", ["package", "answer"])
def test_a_ctrl_c_while_the_request_types_load_is_a_keyboard_interrupt(how: str) -> None:
    # The interrupt is raised by a trace function on the first __set_name__ call (a dataclass
    # field's) inside _requests, where a real Ctrl-C can land; "answer" is the path a modern
    # server's input-required round takes on the caller's thread.
    probe = (
        "import sys, mcpsync, mcpsync.client\n"
        "from mcpsync.client._callbacks import Callbacks\n"
        "def trace(frame, event, arg):\n"
        "    if (event == 'call' and frame.f_code.co_name == '__set_name__'\n"
        "            and 'mcpsync.client._requests' in sys.modules):\n"
        "        sys.settrace(None)\n"
        "        raise KeyboardInterrupt\n"
        "seen = []\n"
        "cb = Callbacks(sampling=lambda req: seen.append(req) or {'role': 'assistant',\n"
        "               'content': {'type': 'text', 'text': 'x'}, 'model': 'm'})\n"
        "request = {'method': 'sampling/createMessage', 'params': {'messages': []}}\n"
        "sys.settrace(trace)\n"
        "try:\n"
        f"    cb.answer_input_request('k', request) if {how!r} == 'answer'"
        " else mcpsync.client.SamplingRequest\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "finally:\n"
        "    sys.settrace(None)\n"
        "assert 'mcpsync.client._requests' not in sys.modules\n"
        "assert cb.answer_input_request('k', request)['model'] == 'm'\n"
        "assert type(seen[0]) is mcpsync.SamplingRequest is mcpsync.client.SamplingRequest\n"
        "print('ok')\n")
    assert _run(probe) == ["interrupted", "ok"]
