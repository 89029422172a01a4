"""examples/notebook.ipynb runs in a real Jupyter kernel and shows what it promises.

nbclient starts an ipykernel, runs every cell against ``examples/notebook_server.py`` and
returns the notebook with its outputs, which are then read like a person would: an HTML
table of tools, a tool proxy's signature, an HTML result, an ``image/png`` output, a
progress bar, a tool error shown as one exception, and a long call stopped by a kernel
interrupt, which the server sees as a cancellation.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import nbformat
import pytest
from helpers import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


def _interrupt_during(client: NotebookClient, slow_sent: threading.Event,
                      done: threading.Event) -> None:
    """The test's hand on the stop button: interrupt the kernel one second into ``slow``.

    The stop button of a kernel in signal mode sends SIGINT; it is sent here to the kernel
    process. (``km.interrupt_kernel()`` signals the kernel's whole process group, and that
    left this ipykernel unable to answer, even for a cell running ``time.sleep``.)
    """
    if slow_sent.wait(30) and not done.wait(1.0):
        os.kill(client.km.provisioner.process.pid, signal.SIGINT)


def _texts(outputs: list[Any], kind: str) -> list[str]:
    return ["".join(o.get("text", "")) if kind == "stream" else o["data"].get("text/html", "")
            for o in outputs if o["output_type"] == kind
            or (kind != "stream" and o["output_type"] in ("execute_result", "display_data"))]


@pytest.mark.timeout(90)
def test_notebook_runs_in_a_kernel_and_displays() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    slow_sent, done = threading.Event(), threading.Event()

    def on_cell_execute(cell: Any, cell_index: int) -> None:
        if '"slow"' in cell.source:
            slow_sent.set()

    client = NotebookClient(nb, timeout=20, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}},
                            on_cell_execute=on_cell_execute)
    pusher = threading.Thread(target=_interrupt_during, name="test-interrupter",
                              args=(client, slow_sent, done), daemon=True)
    pusher.start()
    started = time.monotonic()
    try:
        client.execute()
    finally:
        done.set()
        pusher.join(5)
    elapsed = time.monotonic() - started
    code = [c for c in nb.cells if c.cell_type == "code"]

    # the tool list is a table naming each tool
    tools_cell = next(c for c in code if c.source.startswith("tools = "))
    tools_html = _texts(tools_cell.outputs, "html")[0]
    assert "<table>" in tools_html and all(f"<code>{n}</code>" in tools_html
                                           for n in ("chart", "crunch", "explode", "slow"))

    # a tool proxy: its signature and docstring made from the schema, and a call through it
    proxy_cell = next(c for c in code if "client.tools.crunch" in c.source)
    printed = "".join(_texts(proxy_cell.outputs, "stream"))
    assert printed.startswith("(*, steps: int = 5, delay: float = 0.05, timeout=None, "
                              "progress=None, "), printed
    assert ") -> mcpsync.types.CallToolResult\nWork in steps, reporting progress" in printed
    assert "    steps (integer, optional)" in printed
    results = [o["data"]["text/plain"] for o in proxy_cell.outputs
               if o["output_type"] == "execute_result"]
    assert results == ["'crunched 2 steps'"], proxy_cell.outputs

    # the chart result: a one-line repr printed, and HTML holding the image and the link
    chart_cell = next(c for c in code if c.source.startswith("chart = "))
    printed = _texts(chart_cell.outputs, "stream")[0]
    assert printed.startswith("CallToolResult(content=[ImageContent(mime_type='image/png'")
    assert "base64" not in printed and printed.count("\n") == 1
    chart_html = _texts(chart_cell.outputs, "html")[0]
    assert '<img src="data:image/png;base64,' in chart_html
    assert 'rel="noopener noreferrer"' in chart_html and "A 48x48 gradient" in chart_html

    # the image block alone is an image/png output
    image_cell = next(c for c in code if c.source == "chart.content[0]")
    png = [o for o in image_cell.outputs if "image/png" in o.get("data", {})]
    assert png and png[0]["data"]["image/png"].startswith("iVBORw0KGgo")   # "\x89PNG"

    # progress=True: a bar on the cell's stderr, at 5/5, then the result
    crunch_cell = next(c for c in code if "progress=True" in c.source)
    bar = "".join(o["text"] for o in crunch_cell.outputs
                  if o["output_type"] == "stream" and o["name"] == "stderr")
    assert "demo: crunch" in bar and "5/5" in bar and "100%" in bar, crunch_cell.outputs
    assert "crunched 5 steps" in _texts(crunch_cell.outputs, "html")[0]

    # the tool error: one exception, ToolError, with the server's message
    explode_cell = next(c for c in code if "explode" in c.source)
    errors = [o for o in explode_cell.outputs if o["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ToolError"
    assert "cannot comply: the reactor is offline" in errors[0]["evalue"]
    trace = "\n".join(errors[0]["traceback"])
    assert "During handling" not in trace and "direct cause" not in trace

    # the interrupted call: KeyboardInterrupt in the cell, a second or so after it began
    slow_cell = next(c for c in code if '"slow"' in c.source)
    errors = [o for o in slow_cell.outputs if o["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "KeyboardInterrupt", slow_cell.outputs
    trace = "\n".join(errors[0]["traceback"])
    assert "During handling" not in trace

    # the client still works after the interrupt, and the server saw the cancellation
    last = code[-1]
    assert _texts(last.outputs, "stream") == ["slow calls cancelled: 1\n"], last.outputs
    assert elapsed < 20, f"the notebook took {elapsed:.1f} s"
