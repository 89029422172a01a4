"""Submitted calls load their driver (``client/_submit.py``) on first use, once.

``Client.submit`` and ``Client.submit_tool`` call module names in ``_client`` that the first
submitted call rebinds to the functions in ``_submit``, so later calls run no import
statement; threads that submit their first calls at the same moment all get answers, and the
names end bound to the real functions. Run in a fresh interpreter, where nothing has loaded
``_submit`` yet.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def test_the_first_submitted_calls_load_the_driver_once_from_many_threads() -> None:
    probe = (
        "import sys, threading, mcpsync\n"
        "import mcpsync.client._client as c\n"
        "with mcpsync.connect([sys.executable, '-m', 'mcpsync.demo']) as client:\n"
        "    assert client.call_tool('add', {'a': 1, 'b': 2}).structured is not None\n"
        "    assert 'mcpsync.client._submit' not in sys.modules\n"
        "    start, got = threading.Barrier(8), {}\n"
        "    def go(i):\n"
        "        start.wait()\n"
        "        if i % 2:\n"
        "            got[i] = client.submit_tool('echo', {'text': str(i)}).result(30).text\n"
        "        else:\n"
        "            got[i] = sorted(client.submit('tools/list').result(30))\n"
        "    threads = [threading.Thread(target=go, args=(i,), name=f'mcpsync-test-{i}')\n"
        "               for i in range(8)]\n"
        "    for th in threads: th.start()\n"
        "    for th in threads: th.join()\n"
        "    import mcpsync.client._submit as s\n"
        "    assert c._submit is s.submit and c._submit_tool is s.submit_tool\n"
        "    assert {i: got[i] for i in range(1, 8, 2)} == {i: str(i) for i in range(1, 8, 2)}\n"
        "    assert all('tools' in got[i] for i in range(0, 8, 2)), got\n"
        "    assert client.submit_tool('echo', {'text': 'again'}).result(30).text == 'again'\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
