"""What the rarely used :class:`~mcpsync.client.Client` methods do: skills, completion,
prompts, reading a resource, running or resuming a task, the log level, a call with a
progress bar.

A connect-and-call runs none of them, so ``import mcpsync.client`` does not compile them: each
method keeps its signature and docstring on ``Client`` (for ``help()``, IDEs and the docs) and
imports its function from here when it runs. Each function takes the client as ``client`` and
does what the method's body did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcpsync.client._arguments import check_arguments
from mcpsync.client._callbacks import load_module
from mcpsync.client._client import _submitting, claim_task_cancel
from mcpsync.errors import CapabilityNotSupported, ProtocolError, SkillVerificationError
from mcpsync.protocol import LOG_LEVELS

if TYPE_CHECKING:
    from mcpsync.client._client import Client, ProgressCallback
    from mcpsync.client._future import CallFuture
    from mcpsync.client._skills import LoadedSkill, Skill
    from mcpsync.client._tasks import TaskRun
    from mcpsync.types import CallToolResult, CompleteResult, GetPromptResult, ReadResourceResult


def get_skill(client: Client, uri: str, *, timeout: float | None = None) -> LoadedSkill:
    """:meth:`Client.get_skill`."""
    _require_skills(client, f"loading skill {uri!r}", "skills/get")
    load_module("mcpsync.client._skills")   # loaded by _require_skills: a lookup
    from mcpsync.client._skills import LoadedSkill, Skill, check_frontmatter, fetch_verified
    from mcpsync.types import ReadResourceResult

    identity = _skill_identity(client)
    skill = client._skills.get(identity, uri)
    if skill is None:
        got = client._request("skills/get", {"uri": uri}, timeout=timeout)
        skill = Skill.from_dict(got.get("skill"), client._name)
        if skill.uri != uri:
            raise ProtocolError(f"server {client._name!r}: skills/get for {uri!r} answered "
                                f"with skill {skill.uri!r}", server=client._name,
                                method="skills/get")
        client._skills.remember(identity, [skill])

    def read(file_uri: str) -> dict[str, Any]:
        return client._request("resources/read", {"uri": file_uri}, timeout=timeout)

    listed = skill.file(uri)
    if listed is None and skill.files is not None:
        raise SkillVerificationError(
            f"server {client._name!r}: skill {uri!r} does not list its own SKILL.md, so it "
            "cannot be verified and is not loaded", server=client._name, uri=uri)
    if listed is not None:
        text = fetch_verified(read, listed, skill).decode("utf-8", errors="strict")
    else:   # "dynamic" files: only the frontmatter can be checked
        result = ReadResourceResult.from_dict(read(uri))
        text = result.text
    check_frontmatter(skill, text)
    return LoadedSkill(skill, text, read)


def list_skills(client: Client) -> list[Skill]:
    """:meth:`Client.list_skills`."""
    _require_skills(client, "listing skills", "skills/list")
    load_module("mcpsync._display")
    from mcpsync._display import DisplayList
    load_module("mcpsync.client._skills")   # loaded by _require_skills: a lookup
    from mcpsync.client._skills import Skill

    skills = [Skill.from_dict(d, client._name)
              for d in client._list_all("skills/list", "skills")]
    client._skills.remember(_skill_identity(client), skills)
    return DisplayList(skills)


def _require_skills(client: Client, doing: str, method: str) -> None:
    # The skills module is loaded by the first skills call, not by the client's import.
    load_module("mcpsync.client._skills")
    from mcpsync.client._skills import EXTENSION as SKILLS_EXTENSION

    extensions = client._capabilities.get("extensions")
    if not isinstance(extensions, dict) or SKILLS_EXTENSION not in extensions:
        raise CapabilityNotSupported(
            f"{doing} on server {client._name!r}: the server did not declare the "
            f"{SKILLS_EXTENSION!r} extension", server=client._name, method=method)


def _skill_identity(client: Client) -> str:
    """Who vouches for a skill entry: the server's address (URL or command line)."""
    config = client._config
    return config.url or " ".join([config.command or "", *config.args])


def complete(client: Client, ref: Any, argument: Any,
             context: Mapping[str, Any] | None = None) -> CompleteResult:
    """:meth:`Client.complete`."""
    if client._protocol_version != "2024-11-05":  # the capability exists from 2025-03-26
        client._require("completions", "completing an argument", "completion/complete")
    params: dict[str, Any] = {"ref": _completion_ref(ref),
                              "argument": _completion_argument(argument)}
    if context is not None:
        params["context"] = dict(context) if "arguments" in context else {
            "arguments": dict(context)}
    from mcpsync.types import CompleteResult

    return CompleteResult.from_dict(client._request("completion/complete", params))


def resume_task(client: Client, task_id: str, *, timeout: float | None = None,
                task_timeout: float | None = None,
                progress: ProgressCallback | None = None,
                raise_on_error: bool = False) -> CallToolResult:
    """:meth:`Client.resume_task`."""
    load_module("mcpsync.client._tasks")
    from mcpsync.client._tasks import TaskRun

    task = client._task_request("tasks/get", {"taskId": task_id}, timeout)
    run = TaskRun(client._task_request, server=client._name, tool=f"task {task_id}",
                  modern=client._modern, timeout=timeout, task_timeout=task_timeout,
                  progress=None if progress is None
                  else client._guard.wrap("progress", progress),
                  answer=client._callbacks.answer_input_request)
    run.adopt({"taskId": task_id, **task})
    return client._toolset.result(client._name, task_id, run.wait(), raise_on_error)


def get_prompt(client: Client, name: str, arguments: Mapping[str, str] | None = None, *,
               timeout: float | None = None,
               meta: Mapping[str, Any] | None = None) -> GetPromptResult:
    """:meth:`Client.get_prompt`."""
    client._require("prompts", f"getting prompt {name!r}", "prompts/get")
    from mcpsync.types import GetPromptResult

    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = dict(arguments)
    return GetPromptResult.from_dict(
        client._request("prompts/get", params, timeout=timeout, meta=meta))


def read_resource(client: Client, uri: str, *, timeout: float | None = None,
                  meta: Mapping[str, Any] | None = None) -> ReadResourceResult:
    """:meth:`Client.read_resource`."""
    client._require("resources", f"reading resource {uri!r}", "resources/read")
    from mcpsync.types import ReadResourceResult  # first use loads the resource types

    return ReadResourceResult.from_dict(
        client._request("resources/read", {"uri": uri}, timeout=timeout, meta=meta))


def set_log_level(client: Client, level: str) -> None:
    """:meth:`Client.set_log_level`."""
    if level not in LOG_LEVELS:
        raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    if client._modern:
        client._log_level = level
        client._rebuild_meta()
        return
    client._require("logging", "setting the log level", "logging/setLevel")
    client._request("logging/setLevel", {"level": level})
    client._log_level = level


def _completion_ref(ref: Any) -> dict[str, Any]:
    if isinstance(ref, Mapping):
        return dict(ref)
    from mcpsync.types import Prompt, Resource, ResourceTemplate

    if isinstance(ref, Prompt):
        return {"type": "ref/prompt", "name": ref.name}
    if isinstance(ref, ResourceTemplate):
        return {"type": "ref/resource", "uri": ref.uri_template}
    if isinstance(ref, Resource):
        return {"type": "ref/resource", "uri": ref.uri}
    if isinstance(ref, str):
        if "://" in ref:
            return {"type": "ref/resource", "uri": ref}
        return {"type": "ref/prompt", "name": ref}
    raise TypeError(f"ref must be a dict, a Prompt, a ResourceTemplate or a str, "
                    f"got {type(ref).__name__}")


def _completion_argument(argument: Any) -> dict[str, Any]:
    if isinstance(argument, Mapping):
        return dict(argument)
    if isinstance(argument, (tuple, list)) and len(argument) == 2:
        return {"name": argument[0], "value": argument[1]}
    raise TypeError("argument must be {'name': ..., 'value': ...} or a (name, value) pair")


def call_tool_with_bar(client: Client, name: str, arguments: Mapping[str, Any] | None,
                       progress: object, **options: Any) -> CallToolResult:
    """:meth:`Client._call_tool_with_bar` (``call_tool(progress=True)``)."""
    load_module("mcpsync.client._progress")
    from mcpsync.client._progress import check_progress, progress_bar  # bars: first use
    check_progress(progress, f"calling tool {name!r} on server {client._name!r}")
    validate = options.get("validate_input")
    if (client._toolset.required is not None and
            (client._validate_input if validate is None else validate)):
        check_arguments(client._name, name, arguments, client._toolset, client._relist_tools)
    bar = progress_bar(progress, f"calling tool {name!r} on server {client._name!r}",
                       f"{client._name}: {name}")
    try:
        return client.call_tool(name, arguments, progress=bar, **options)
    finally:
        if bar is not None:
            bar.close()


def task_call(client: Client, name: str, params: dict[str, Any] | None, timeout: float | None,
              task_timeout: float | None, progress: Any, raise_on_error: bool, *,
              created: dict[str, Any] | None = None,
              future: CallFuture | None = None) -> CallToolResult:
    """:meth:`Client._task_call`: a ``tools/call`` run as a task to its end."""
    modern = created is not None
    run: TaskRun | None = None
    answer: dict[str, Any] | None = None
    try:   # from the start: a Ctrl-C in the lookup below cancels a created task too
        load_module("mcpsync.client._tasks")   # loaded by Client._task_call: a lookup
        from mcpsync.client._tasks import TaskRun

        if created is None:   # a 2025-11-25 server: ask it for a task
            assert params is not None
            # The answer is kept before the task is taken out of it: a Ctrl-C as get()
            # returns still finds the task to cancel.
            answer = client._request("tools/call", {**params, "task": {}}, timeout=timeout)
            created = answer.get("task")
        run = TaskRun(client._task_request, server=client._name, tool=name,
                      modern=modern, timeout=timeout, task_timeout=task_timeout,
                      progress=None if progress is None
                      else client._guard.wrap("progress", progress),
                      answer=client._callbacks.answer_input_request)
        handle = run.adopt(created)
        future = future or getattr(_submitting, "future", None)
        if future is not None:
            future.task = handle
            if future.cancelled():
                handle.cancel()
    except KeyboardInterrupt as exc:   # Ctrl-C as the task starts: it is cancelled too
        if not claim_task_cancel(exc, created):
            raise
        if run is not None and run.handle is not None:
            run.handle.cancel()
        elif created is not None:   # created, not yet followed
            client._cancel_created(created)
        elif answer is not None:   # a 2025-11-25 task, not yet taken out of the answer
            client._cancel_created(answer.get("task"))
        raise
    got: dict[str, Any] | None = None
    try:
        got = run.wait()
        return client._toolset.result(client._name, name, got, raise_on_error)
    except KeyboardInterrupt as exc:
        # TaskRun.wait cancels its task on a Ctrl-C (and claims it), but not on one as it
        # begins (before its try): that is sent here. Once the wait has returned the task is
        # over (a 2026-07-28 task completed; a 2025-11-25 one answered tasks/result, its
        # handle's status perhaps still the last polled, input_required), so a Ctrl-C in
        # the result's parsing sends nothing; it is claimed all the same, so that no
        # handler further out sends tasks/cancel for it either.
        if claim_task_cancel(exc, created) and got is None:
            handle.cancel()
        raise
