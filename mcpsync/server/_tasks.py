"""Tools that run as tasks (the ``io.modelcontextprotocol/tasks`` extension of 2026-07-28).

A tool registered with task support ``optional`` or ``required`` answers a 2026-07-28
``tools/call`` whose client declared the extension with a ``CreateTaskResult`` at once; its
handler then runs on a thread of its own (``mcpsync-task-<n>``) while the client polls
``tasks/get``, answers asks through ``tasks/update`` and may ``tasks/cancel``. Why a thread
and not the request's worker: the request is answered before the work is done, and a worker
held for minutes would starve ordinary calls.

Inside a task an ask (``ctx.elicit`` ...) does not end the run as an ``input_required`` round
does: the task turns ``input_required`` with the ask under ``inputRequests`` and the handler
waits until ``tasks/update`` answers every pending key (or the task is cancelled). The store
is bounded: at most ``MAX_RUNNING`` tasks run at once and ``MAX_KEPT`` are remembered; a
finished task is kept for its ``ttlMs`` after creation, then forgotten. Task ids are random
and unguessable, because on a shared HTTP endpoint the id is what lets a client see a task.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from mcpsync._threads import join_all, new_thread
from mcpsync.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_CLIENT_CAPABILITY,
    RequestId,
)
from mcpsync.server._asking import MissingCapability, TaskCancelled, _Keys, required_capability
from mcpsync.server._context import Context, _Call, _stderr
from mcpsync.server._request import Refusal, Request

__all__ = ["MAX_KEPT", "MAX_RUNNING", "TASKS_EXTENSION", "TASK_SUPPORT", "TaskStore",
           "declares_tasks", "missing_tasks"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_SUPPORT = ("forbidden", "optional", "required")
MAX_RUNNING = 64
MAX_KEPT = 1024
DEFAULT_TTL_MS = 600_000
POLL_INTERVAL_MS = 500
_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_numbers = itertools.count(1)


def declares_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Did this request's client capabilities declare the tasks extension?"""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def missing_tasks(what: str) -> Refusal:
    """The -32021 answer for a client that did not declare the extension."""
    return Refusal(MISSING_CLIENT_CAPABILITY,
                   f"{what} needs the {TASKS_EXTENSION} extension: declare it under "
                   "_meta clientCapabilities.extensions of the request",
                   {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Task:
    """One task's state; every field is read and written under the store's lock."""

    def __init__(self, task_id: str, call: _Call, ttl_ms: int) -> None:
        self.id = task_id
        self.call = call
        self.status = "working"
        self.created = self.updated = _now()
        self.born = time.monotonic()
        self.ttl_ms = ttl_ms
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.message: str | None = None
        self.pending: dict[str, tuple[str, dict[str, Any]]] = {}
        self.answers: dict[str, dict[str, Any]] = {}
        self.thread: threading.Thread | None = None

    def view(self) -> dict[str, Any]:
        """The task as ``tasks/get`` and ``notifications/tasks`` show it (a DetailedTask)."""
        out: dict[str, Any] = {"taskId": self.id, "status": self.status,
                               "createdAt": self.created, "lastUpdatedAt": self.updated,
                               "ttlMs": self.ttl_ms, "pollIntervalMs": POLL_INTERVAL_MS}
        if self.message is not None:
            out["statusMessage"] = self.message
        if self.status == "input_required":
            out["inputRequests"] = {key: {"method": method, "params": params}
                                    for key, (method, params) in self.pending.items()}
        elif self.status == "completed" and self.result is not None:
            out["result"] = self.result
        elif self.status == "failed" and self.error is not None:
            out["error"] = self.error
        return out


class _TaskAsker:
    """``ctx`` asks inside a task: answered from ``tasks/update``, the handler waiting."""

    def __init__(self, store: TaskStore, task: _Task, capabilities: Mapping[str, Any],
                 seeded: Mapping[str, dict[str, Any]]) -> None:
        self._store = store
        self._task = task
        self._capabilities = capabilities
        self._seeded = dict(seeded)   # answers gathered in rounds before the task began
        self._keys = _Keys()

    def ask(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        key = self._keys.next(key)
        return self._store.gather(self._task, {key: (method, params)}, self._seeded,
                                  self._capabilities)[key]

    def ask_all(self, asks: Mapping[str, tuple[str, dict[str, Any]]]
                ) -> dict[str, dict[str, Any]]:
        keyed = {self._keys.next(key): ask for key, ask in asks.items()}
        return self._store.gather(self._task, keyed, self._seeded, self._capabilities)


class TaskStore:
    """The tasks of one router: created by ``tools/call``, read and steered by ``tasks/*``.

    ``notify(task_id, detailed)`` is called (outside the lock) on every status change, for
    ``subscriptions/listen`` streams that asked for the task.
    """

    def __init__(self, notify: Callable[[str, dict[str, Any]], None]) -> None:
        self._notify = notify
        self._cond = threading.Condition()
        self._tasks: dict[str, _Task] = {}
        self._threads: set[threading.Thread] = set()   # every task thread not yet ended
        self._closed = False

    # -- creating ------------------------------------------------------------------------

    def start(self, req: Request, name: str, seeded: Mapping[str, dict[str, Any]],
              body: Callable[[Context], dict[str, Any]]) -> dict[str, Any]:
        """Create a task running ``body(ctx)`` and return its ``CreateTaskResult``; the task
        is in the store (``tasks/get`` finds it) before this returns."""
        number = next(_numbers)
        call = _Call(RequestId(f'"task-{number}"', f"task-{number}"), "tools/call")
        call.sink = _drop   # progress and log messages are not sent for tasks
        task = _Task(secrets.token_urlsafe(18), call, DEFAULT_TTL_MS)
        ctx = Context(call, protocol_version=req.version, meta=req.meta, send=_drop,
                      log_threshold=lambda: None,
                      asker=_TaskAsker(self, task, req.capabilities, seeded),
                      client_capabilities=req.capabilities)
        with self._cond:
            self._expire()
            # Threads, not statuses: a cancelled handler that ignores its cancellation still
            # holds a thread, and counts until it returns.
            self._threads = {t for t in self._threads if t.is_alive()}
            running = len(self._threads)
            if self._closed:
                raise Refusal(INTERNAL_ERROR, f"tools/call {name!r}: the server is closing")
            if running >= MAX_RUNNING:
                raise Refusal(INTERNAL_ERROR, f"tools/call {name!r}: this server already runs "
                              f"{running} tasks; try again when some have finished")
            if len(self._tasks) >= MAX_KEPT:
                self._evict_finished()
            if len(self._tasks) >= MAX_KEPT:
                raise Refusal(INTERNAL_ERROR, f"tools/call {name!r}: this server remembers "
                              f"{MAX_KEPT} unfinished tasks; try again when some have finished")
            self._tasks[task.id] = task
            thread = new_thread(f"mcpsync-task-{number}", self._run, task, name, body, ctx)
            task.thread = thread
            self._threads.add(thread)
        thread.start()
        created = task.view()
        return {"resultType": "task", **created}

    def _run(self, task: _Task, name: str, body: Callable[[Context], dict[str, Any]],
             ctx: Context) -> None:
        result: dict[str, Any] | None = None
        failure: dict[str, Any] | None = None
        try:
            result = body(ctx)
        except TaskCancelled:
            pass
        except Refusal as refusal:
            failure = {"code": refusal.code, "message": refusal.message}
            if refusal.data is not None:
                failure["data"] = refusal.data
        except MissingCapability as missing:
            failure = {"code": MISSING_CLIENT_CAPABILITY,
                       "message": f"tool {name!r} needs the client capability {missing.method}",
                       "data": {"requiredCapabilities": missing.required}}
        except BaseException as exc:  # the task fails; the thread must not die noisily
            _stderr(f"task of tool {name!r} failed:\n"
                    + "".join(traceback.format_exception(exc)).rstrip())
            failure = {"code": INTERNAL_ERROR,
                       "message": f"internal error in tool {name!r}: {type(exc).__name__}"}
        with self._cond:
            if task.status in _TERMINAL:   # cancelled meanwhile: what it returned is dropped
                return
            task.pending.clear()
            if failure is not None:
                task.status, task.error = "failed", failure
            else:
                task.status, task.result = "completed", result
            # Kept for its ttlMs from now: a task that ran longer than its TTL does not lose
            # its result the moment it finishes (the TTL may change over a task's life).
            task.born = time.monotonic()
            view = self._touch(task)
        self._tell(task.id, view)

    # -- the task's own asks -------------------------------------------------------------

    def gather(self, task: _Task, asks: Mapping[str, tuple[str, dict[str, Any]]],
               seeded: Mapping[str, dict[str, Any]],
               capabilities: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Answers to ``asks``: seeded ones at once, the others once ``tasks/update`` gave
        them all (the task is ``input_required`` meanwhile)."""
        got = {key: seeded[key] for key in asks if key in seeded}
        wanted = {key: ask for key, ask in asks.items() if key not in got}
        if not wanted:
            return got
        for method, params in wanted.values():
            missing = required_capability(capabilities, method, params)
            if missing is not None:
                raise MissingCapability(method, missing)
        with self._cond:
            if task.status in _TERMINAL:
                raise TaskCancelled
            task.pending.update(wanted)
            task.status = "input_required"
            view = self._touch(task)
        self._tell(task.id, view)
        with self._cond:
            while not all(key in task.answers for key in wanted):
                if task.status in _TERMINAL or task.call.cancelled.is_set():
                    raise TaskCancelled
                self._cond.wait(1.0)
            got.update((key, task.answers.pop(key)) for key in wanted)
            if task.status == "input_required" and not task.pending:
                task.status = "working"
            view = self._touch(task)
        self._tell(task.id, view)
        return got

    # -- tasks/get, tasks/update, tasks/cancel -------------------------------------------

    def _find(self, params: Mapping[str, Any], method: str) -> _Task:
        task_id = params.get("taskId")
        if not isinstance(task_id, str):
            raise Refusal(INVALID_PARAMS, f"{method} needs params with a string 'taskId'")
        self._expire()
        task = self._tasks.get(task_id)
        if task is None:
            raise Refusal(INVALID_PARAMS, f"{method}: no task {task_id!r} (unknown, or "
                          "forgotten after its ttlMs)", {"taskId": task_id})
        return task

    def get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        with self._cond:
            return self._find(params, "tasks/get").view()

    def update(self, params: Mapping[str, Any]) -> dict[str, Any]:
        responses = params.get("inputResponses")
        if not isinstance(responses, dict):
            raise Refusal(INVALID_PARAMS, "tasks/update needs params.inputResponses, an object "
                          "mapping input request keys to answers")
        with self._cond:
            task = self._find(params, "tasks/update")
            for key, answer in responses.items():
                if key in task.pending and isinstance(answer, dict):
                    del task.pending[key]   # keys nobody waits for are ignored
                    task.answers[key] = answer
            if task.status == "input_required" and not task.pending:
                task.status = "working"   # every ask answered: the handler goes on
            self._cond.notify_all()
            view = self._touch(task)
        self._tell(task.id, view)
        return {}

    def cancel(self, params: Mapping[str, Any]) -> dict[str, Any]:
        with self._cond:
            task = self._find(params, "tasks/cancel")
            if task.status in _TERMINAL:
                return {}   # idempotent: a finished task stays as it finished
            task.status = "cancelled"
            task.pending.clear()
            task.call.cancel()
            self._cond.notify_all()
            view = self._touch(task)
        self._tell(task.id, view)
        return {}

    def known(self, task_ids: list[str]) -> list[str]:
        with self._cond:
            return [t for t in dict.fromkeys(task_ids) if t in self._tasks]

    # -- housekeeping --------------------------------------------------------------------

    def _touch(self, task: _Task) -> dict[str, Any]:
        task.updated = _now()
        return task.view()

    def _tell(self, task_id: str, view: dict[str, Any]) -> None:
        try:
            self._notify(task_id, view)
        except Exception as exc:   # a listener's failure is never the task's
            _stderr(f"could not send the status of task {task_id}: {type(exc).__name__}")

    def _expire(self) -> None:
        """Under the lock: forget finished tasks past their ttlMs (counted from when they
        finished), and fail unfinished ones past theirs (counted from creation): a task
        waiting for input nobody gives must not hold its slot and thread for good."""
        now = time.monotonic()
        for task in list(self._tasks.values()):
            if now - task.born <= task.ttl_ms / 1000:
                continue
            if task.status in _TERMINAL:
                del self._tasks[task.id]
            else:
                task.status = "failed"
                task.error = {"code": INTERNAL_ERROR,
                              "message": f"the task outlived its ttlMs ({task.ttl_ms} ms)"}
                task.pending.clear()
                task.call.cancel()
                task.born = now          # the failure is kept for a TTL of its own
                self._cond.notify_all()

    def _evict_finished(self) -> None:
        """Under the lock: make room by forgetting the oldest finished tasks."""
        finished = sorted((t for t in self._tasks.values() if t.status in _TERMINAL),
                          key=lambda t: t.born)
        for task in finished[:max(1, len(self._tasks) - MAX_KEPT + 1)]:
            del self._tasks[task.id]

    def close(self, timeout: float = 5.0) -> None:
        """The router ends: cancel every running task and join its thread."""
        with self._cond:
            self._closed = True
            tasks = list(self._tasks.values())
            for task in tasks:
                if task.status not in _TERMINAL:
                    task.status = "cancelled"
                task.call.cancel()
            self._cond.notify_all()
            threads = list(self._threads)   # also those of tasks already forgotten
        join_all(threads, time.monotonic() + timeout)


def _drop(_message: Any, _cancelled: threading.Event | None = None, /) -> None:
    """Where a task's progress and log notifications go: nowhere."""
