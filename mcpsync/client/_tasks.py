"""Tool calls that run as tasks: create, poll, answer input, fetch the result, cancel.

Two generations exist and a caller sees the same thing from both (``call_tool`` returns the
final ``CallToolResult``):

- the experimental tasks of 2025-11-25: the client asks for a task (``params.task``) when the
  tool requires one (``execution.taskSupport``), gets ``{"task": Task}`` back, polls
  ``tasks/get`` and fetches the outcome with ``tasks/result``, which blocks until the task is
  terminal (and over which the server sends the elicitation or sampling it needs);
- the Tasks extension of 2026-07-28 (``io.modelcontextprotocol/tasks``): the client declares
  the extension on the request, the server decides, and answers ``resultType: "task"`` with
  the Task itself; ``tasks/get`` carries the final ``result`` (or ``error``) and the
  outstanding ``inputRequests``, answered with ``tasks/update``.

Polling follows the server's interval clamped to 0.1-30 s. ``timeout`` bounds each request;
``task_timeout`` bounds the whole task, whose TTL is the backstop. A timeout, a cancelled
future and Ctrl-C send ``tasks/cancel`` before the error goes on.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from mcpsync.client._client import claim_task_cancel
from mcpsync.errors import Cancelled, MCPError, ProtocolError, RemoteError, RequestTimeout

TERMINAL = frozenset(("completed", "failed", "cancelled"))
_MIN_POLL, _MAX_POLL, _DEFAULT_POLL = 0.1, 30.0, 1.0
_CANCEL_TIMEOUT = 5.0
# What every connection needs of the Tasks extension (its name, whether a server runs tools as
# tasks, the _meta that declares it) is in _handshake: this module loads with the first task.

#: one request: (method, params, timeout) -> result dict
Request = Callable[[str, Mapping[str, Any], "float | None"], dict[str, Any]]




class TaskHandle:
    """The task behind a tool call: ``task_id``, the last ``status`` (and ``status_message``)
    seen, and ``cancel()``, which sends ``tasks/cancel`` and stops the waiting call.

    Keep ``task_id`` to pick the result up later with ``Client.resume_task(task_id)``.
    """

    def __init__(self, task_id: str, status: str, status_message: str | None,
                 request: Request, server: str) -> None:
        self.task_id = task_id
        self.status = status
        self.status_message = status_message
        self._request = request
        self._server = server
        self._cancelled = threading.Event()

    def cancel(self) -> bool:
        """Ask the server to cancel the task; ``False`` when it was already terminal (or the
        server refused). The call waiting on it raises ``Cancelled``."""
        already = self._cancelled.is_set()
        self._cancelled.set()
        if already or self.status in TERMINAL:
            return False
        try:
            self._request("tasks/cancel", {"taskId": self.task_id}, _CANCEL_TIMEOUT)
        except MCPError:
            return False
        return True

    @property
    def cancel_requested(self) -> bool:
        return self._cancelled.is_set()

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r}, status={self.status!r})"


def poll_interval(task: Mapping[str, Any]) -> float:
    """Seconds until the next ``tasks/get``: the server's hint clamped to 0.1-30 s."""
    ms = task.get("pollIntervalMs", task.get("pollInterval"))
    if ms.__class__ not in (int, float) or not math.isfinite(ms):
        return _DEFAULT_POLL
    return min(max(float(ms) / 1000.0, _MIN_POLL), _MAX_POLL)


def _ttl(task: Mapping[str, Any]) -> float | None:
    ms = task.get("ttlMs", task.get("ttl"))
    return float(ms) / 1000.0 if ms.__class__ in (int, float) and ms >= 0 else None


class TaskRun:
    """Follow one task to its end; ``modern`` picks the generation (see the module text)."""

    def __init__(self, request: Request, *, server: str, tool: str, modern: bool,
                 timeout: float | None, task_timeout: float | None,
                 progress: Callable[[float, float | None, str | None], Any] | None,
                 answer: Callable[[str, Any], dict[str, Any]] | None = None) -> None:
        self._request = request
        self._server = server
        self._tool = tool
        self._modern = modern
        self._timeout = timeout
        self._task_timeout = task_timeout
        self._progress = progress
        self._answer = answer
        self._updates = 0
        self._answered: set[str] = set()
        self.handle: TaskHandle | None = None
        #: The ``Task`` adopted, the object a Ctrl-C's cancel is claimed for.
        self._task: Any = None
        self._deadline = math.inf
        self._backstop = False

    def _describe(self) -> str:
        return f"task of tool {self._tool!r} on server {self._server!r}"

    def adopt(self, task: Any) -> TaskHandle:
        """Take the ``Task`` of a ``CreateTaskResult`` (or of ``tasks/get``, when resuming)."""
        if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
            raise ProtocolError(f"{self._describe()}: the server answered with no task id: "
                                f"{task!r:.200}", server=self._server, method="tools/call")
        message = task.get("statusMessage")
        self._task = task
        self.handle = TaskHandle(task["taskId"], str(task.get("status", "working")),
                                 message if isinstance(message, str) else None,
                                 self._request, self._server)
        now = time.monotonic()
        if self._task_timeout is not None and math.isfinite(self._task_timeout):
            self._deadline = now + self._task_timeout
        elif (ttl := _ttl(task)) is not None:
            self._deadline, self._backstop = now + ttl, True
        self._report(task)
        return self.handle

    def _report(self, task: Mapping[str, Any]) -> None:
        handle = self.handle
        assert handle is not None
        status, message = task.get("status"), task.get("statusMessage")
        before = (handle.status, handle.status_message)
        if isinstance(status, str):
            handle.status = status
        handle.status_message = message if isinstance(message, str) else None
        if self._progress is not None and (self._updates == 0
                                           or before != (handle.status, handle.status_message)):
            self._updates += 1
            text = handle.status if handle.status_message is None \
                else f"{handle.status}: {handle.status_message}"
            self._progress(float(self._updates), None, text)

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._expire()
        return left

    def _bounded(self) -> float | None:
        """The timeout of the next request: the caller's, within what the task has left."""
        if math.isinf(self._deadline):
            return self._timeout
        left = self._remaining()
        return left if self._timeout is None else min(self._timeout, left)

    def _expire(self) -> None:
        handle = self.handle
        assert handle is not None
        handle.cancel()
        why = ("outlived its time-to-live" if self._backstop
               else f"did not finish within task_timeout={self._task_timeout} s")
        raise RequestTimeout(f"{self._describe()} ({handle.task_id}) {why}; tasks/cancel "
                             "was sent", server=self._server, method="tools/call")

    def _check_cancel(self) -> None:
        handle = self.handle
        assert handle is not None
        if handle.cancel_requested:
            raise Cancelled(f"{self._describe()} ({handle.task_id}) was cancelled",
                            server=self._server, method="tools/call")

    def wait(self) -> dict[str, Any]:
        """The final ``CallToolResult`` dict. A timeout, a cancel and Ctrl-C cancel the
        task on the server (``tasks/cancel``) before raising."""
        handle = self.handle
        assert handle is not None
        try:
            return self._follow(handle)
        except KeyboardInterrupt as exc:
            # Claimed first (see claim_task_cancel): a second Ctrl-C landing in this cancel
            # must not make a handler further out (call_tool's) send another one.
            if claim_task_cancel(exc, self._task) and handle.status not in TERMINAL:
                handle.cancel()
            raise
        except RequestTimeout:
            if handle.status not in TERMINAL:
                handle.cancel()
            raise

    def _follow(self, handle: TaskHandle) -> dict[str, Any]:
        task: dict[str, Any] = {"status": handle.status}
        while True:
            self._check_cancel()
            status = handle.status
            if self._modern:
                if status == "completed" and isinstance(task.get("result"), dict):
                    return dict(task["result"])
                if status == "failed":
                    raise _task_error(task.get("error"), self._describe(), self._server)
                if status == "input_required":
                    self._answer_inputs(handle, task)
            elif status in ("completed", "failed", "input_required"):
                # tasks/result blocks until the task is terminal; input requests arrive
                # over it and are answered by the client's callbacks.
                return self._request("tasks/result", {"taskId": handle.task_id},
                                     self._bounded())
            if status == "cancelled":
                raise Cancelled(f"{self._describe()} ({handle.task_id}) was cancelled on the "
                                "server", server=self._server, method="tools/call")
            delay = poll_interval(task)
            if not math.isinf(self._deadline):
                delay = min(delay, max(self._remaining(), 0.0))
            if handle._cancelled.wait(delay):
                continue
            task = self._request("tasks/get", {"taskId": handle.task_id}, self._bounded())
            self._report(task)

    def _answer_inputs(self, handle: TaskHandle, task: Mapping[str, Any]) -> None:
        """Answer the ``inputRequests`` not answered yet (a key is answered once, however
        many polls repeat it) with ``tasks/update``."""
        requests = task.get("inputRequests")
        if not isinstance(requests, Mapping) or self._answer is None:
            return
        fresh = {key: req for key, req in requests.items() if key not in self._answered}
        if not fresh:
            return
        responses = {key: self._answer(key, req) for key, req in fresh.items()}
        self._request("tasks/update", {"taskId": handle.task_id, "inputResponses": responses},
                      self._bounded())
        self._answered.update(fresh)


def _task_error(error: Any, describe: str, server: str) -> MCPError:
    if isinstance(error, Mapping) and isinstance(error.get("code"), int):
        return RemoteError(f"{describe} failed: {error.get('message', '')}",
                           code=error["code"], remote_message=str(error.get("message", "")),
                           data=error.get("data"), server=server, method="tools/call")
    return ProtocolError(f"{describe} failed without a JSON-RPC error: {error!r:.200}",
                         server=server, method="tools/call")
