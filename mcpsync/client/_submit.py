"""Submitted calls: ``Client.submit`` and ``Client.submit_tool``, and the future driver,
:class:`FutureFlow`, that carries their rounds.

A connect-and-call never submits, so ``import mcpsync.client`` does not compile this: the two
methods keep their signatures and docstrings on ``Client`` and call the functions here
through module names in ``_client`` that the first submitted call rebinds to them (so later
calls run no import statement). Each function takes the client as ``client`` and does what
the method's body did. The policy of a call's rounds (:func:`~mcpsync.client._flow.call_flow`)
and the workers that carry rounds between answers (``RoundWorkers``, which every client
makes and joins on close) stay in ``_flow``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcpsync.client._arguments import check_arguments
from mcpsync.client._callbacks import load_module
from mcpsync.client._client import _submitting
from mcpsync.client._flow import Call, Flow, Round, RoundWorkers, call_flow
from mcpsync.client._future import CallFuture
from mcpsync.protocol import describe_call

if TYPE_CHECKING:
    from mcpsync.client._client import Client, ProgressCallback

__all__ = ["FutureFlow", "submit", "submit_tool"]


def submit(client: Client, method: str, params: Mapping[str, Any] | None, *,
           timeout: float | None, progress: ProgressCallback | None,
           reset_timeout_on_progress: bool | None,
           meta: Mapping[str, Any] | None) -> CallFuture:
    """:meth:`Client.submit`."""
    call = client._call(method, params, meta, timeout, progress, reset_timeout_on_progress)
    future = CallFuture(describe_call(method, params, client._name), client._name, method)
    FutureFlow(call_flow(client, call), call, future,
               lambda result: client._dict_result(method, params, result),
               client._workers).start()
    return future


def submit_tool(client: Client, name: str, arguments: Mapping[str, Any] | None, *,
                timeout: float | None, progress: ProgressCallback | bool | None,
                raise_on_error: bool, retry_on_drop: bool, meta: Mapping[str, Any] | None,
                reset_timeout_on_progress: bool | None, validate_input: bool | None,
                task_timeout: float | None, tasks: bool) -> CallFuture:
    """:meth:`Client.submit_tool`."""
    if client._toolset.required is not None and (
            client._validate_input if validate_input is None else validate_input):
        check_arguments(client._name, name, arguments, client._toolset, client._relist_tools)
    bar = None
    if progress is not None and (progress.__class__ is bool or not callable(progress)):
        load_module("mcpsync.client._progress")
        from mcpsync.client._progress import progress_bar

        bar = progress_bar(progress, f"calling tool {name!r} on server {client._name!r}",
                           f"{client._name}: {name}")
        progress = bar
    future = CallFuture(f"calling tool {name!r} on server {client._name!r}", client._name,
                        "tools/call")
    if (client._may_task and client._needs_task(name)) or (
            tasks and client._modern and client._tool_meta is not client._meta):
        submit_task(client, future, name, arguments, timeout=timeout, progress=progress,
                          raise_on_error=raise_on_error, meta=meta,
                          task_timeout=task_timeout)
        if bar is not None:
            future.add_done_callback(lambda _: bar.close())
        return future
    call = client._tool_call(name, arguments, meta, timeout, progress,
                           reset_timeout_on_progress, retry_on_drop, tasks)
    FutureFlow(call_flow(client, call), call, future,
               lambda result: client._toolset.result(client._name, name, result,
                                                   raise_on_error),
               client._workers).start()
    if bar is not None:
        future.add_done_callback(lambda _: bar.close())
    return future


def submit_task(client: Client, future: CallFuture, name: str,
                arguments: Mapping[str, Any] | None, **options: Any) -> None:
    """A call that may run as a task, carried by a worker thread: the blocking call,
    with the future handed down so that the task's handle lands on ``future.task``."""
    def work() -> None:
        _submitting.future = future
        try:
            value = client.call_tool(name, arguments, validate_input=False, **options)
        except BaseException as exc:   # everything goes to the future
            future._fail(exc)
        else:
            future._resolve(value)
        finally:
            _submitting.future = None

    client._workers.start(work)


class FutureFlow:
    """Drive one submitted call's flow: each round's answer arrives on the dispatcher thread
    (:meth:`answered`); a plain answer settles the future there, and a hop moves the flow
    to a worker, which sends the next round."""

    __slots__ = ("_call", "_finish", "_flow", "_future", "_workers")

    def __init__(self, flow: Flow, call: Call, future: CallFuture,
                 finish: Callable[[Any], Any], workers: RoundWorkers) -> None:
        self._flow = flow
        self._call = call
        self._future = future
        self._finish = finish
        self._workers = workers

    def start(self) -> None:
        """Send the first round (in the caller's thread; its errors raise there)."""
        step = next(self._flow)
        assert step is not None
        self._send(step)

    def _send(self, step: Round) -> None:
        call = self._call
        wire = step.session.submit(call.method, step.params, timeout=call.timeout,
                                   progress=call.progress, reset_timeout_on_progress=call.reset)
        if self._future._attach(wire):
            wire.add_done_callback(self.answered)

    def answered(self, wire: concurrent.futures.Future[Any]) -> None:
        """A round ended (dispatcher thread): settle the future, or hop to a worker."""
        future = self._future
        if future.done() or wire.cancelled():
            return
        error = wire.exception()
        try:
            flow = self._flow
            step = flow.throw(error) if error is not None else flow.send(wire.result())
        except StopIteration as stop:
            self._settle(stop.value)
            return
        except Exception as exc:   # the policy's own errors (protocol, rounds exceeded)
            future._fail(exc)
            return
        future._between_rounds()
        if step is None:
            self._workers.start(self._resume)
        else:
            self._resume(step)

    def _settle(self, result: Any) -> None:
        try:
            value = self._finish(result)
        except Exception as exc:   # the conversion's own errors (validation, protocol)
            self._future._fail(exc)
        else:
            self._future._resolve(value)

    def _resume(self, step: Round | None = None) -> None:
        """Run the flow up to its next round and send it (on a worker)."""
        try:
            while step is None:
                step = next(self._flow)
            if self._future.cancelled():
                return
            self._send(step)
        except StopIteration as stop:
            self._settle(stop.value)
        except BaseException as exc:  # the future carries every outcome
            self._future._fail(exc)
