"""Every server scenario of the conformance suite 0.2.0-alpha.12, and where our fixture stands.

``SCENARIOS`` maps each scenario that ``conformance list --server`` prints to:

- ``specs``: the revisions the suite lists it for (``extension``: run but never scored);
- ``required``: the revisions whose ``--requirements`` set scores it;
- ``fixtures``: the tools, prompts and resources of ``server.py`` it calls (empty when it
  only exercises the protocol itself: initialize, ping, logging/setLevel, lists);
- ``status``: ``covered`` (the fixture and ``mcpsync.Server`` do what every check asks),
  ``extension: ...`` (an extension mcpsync does not implement), ``suite placeholder``
  (the suite records one SKIPPED check and nothing else, so it cannot pass),
  ``needs HTTP-only feature: ...`` (the fixtures are there; what is judged is the Streamable
  HTTP transport, which ``Server.serve_http`` provides), or ``needs Server feature: ...``
  (``mcpsync.Server`` cannot produce what the scenario checks; ``note`` says what).

``test_server_fixture`` checks that this table lists exactly the suite's scenarios and that
every fixture named here exists; ``test_server_conformance`` runs the suite against the
fixture over HTTP and checks that the status column says what those runs find (every
``covered`` scenario passes; the others are its strict expected failures).
"""

from __future__ import annotations

from typing import Any

__all__ = ["COVERED", "SCENARIOS", "SUITE_VERSION"]

SUITE_VERSION = "0.2.0-alpha.12"
COVERED = "covered"

_OLD = ("2025-06-18", "2025-11-25")
_ALL = ("2025-06-18", "2025-11-25", "2026-07-28")
_NEW = ("2026-07-28",)
_EXT = ("extension",)
_R25 = ("2025-11-25",)
_R26 = ("2026-07-28",)
_RBOTH = ("2025-11-25", "2026-07-28")


def _s(specs: tuple[str, ...], required: tuple[str, ...], fixtures: tuple[str, ...],
       status: str = COVERED, note: str = "") -> dict[str, Any]:
    return {"specs": specs, "required": required, "fixtures": fixtures, "status": status,
            "note": note}


_SLOW = ("greet", "slow_compute")
_SKILL = ("skill://pdf-processing/SKILL.md", "skill://pdf-processing/references/FORMS.md")
_ELICIT = ("test_input_required_result_elicitation",)

SCENARIOS: dict[str, dict[str, Any]] = {
    "server-initialize": _s(_OLD, _R25, ()),
    "server-session-lifecycle": _s(("2025-03-26", *_OLD), (), ("tools/list",)),
    "server-stateless": _s(
        _NEW, _R26, ("test_missing_capability", "test_streaming_elicitation",
                     "test_logging_tool", "test_trigger_tool_change",
                     "test_trigger_prompt_change"),
        note="HTTP statuses per error, header checks and subscriptions/listen as an SSE "
             "stream come from Server.serve_http"),
    "logging-set-level": _s(_OLD, _R25, ()),
    "ping": _s(_OLD, _R25, ()),
    "completion-complete": _s(_ALL, _RBOTH, ("test_prompt_with_arguments",)),
    "tools-list": _s(_ALL, _RBOTH, ()),
    "tools-call-simple-text": _s(_ALL, _RBOTH, ("test_simple_text",)),
    "tools-call-image": _s(_ALL, _RBOTH, ("test_image_content",)),
    "tools-call-audio": _s(_ALL, _RBOTH, ("test_audio_content",)),
    "tools-call-embedded-resource": _s(_ALL, _RBOTH, ("test_embedded_resource",)),
    "tools-call-mixed-content": _s(_ALL, _RBOTH, ("test_multiple_content_types",)),
    "tools-call-with-logging": _s(_OLD, _R25, ("test_tool_with_logging",)),
    "tools-call-error": _s(_ALL, _RBOTH, ("test_error_handling",)),
    "tools-call-with-progress": _s(_ALL, _RBOTH, ("test_tool_with_progress",)),
    "tools-call-sampling": _s(_OLD, _R25, ("test_sampling",)),
    "tools-call-elicitation": _s(_OLD, _R25, ("test_elicitation",)),
    "json-schema-2020-12": _s(("2025-11-25", "2026-07-28"), (),
                              ("json_schema_2020_12_tool",),
                              note="pending in the suite: run but not scored"),
    "elicitation-sep1034-defaults": _s(_R25, _R25, ("test_elicitation_sep1034_defaults",)),
    "server-sse-polling": _s(_R25, (), ("test_reconnection",),
                             note="pending in the suite: run but not scored"),
    "server-sse-multiple-streams": _s(_RBOTH, _RBOTH, ("tools/list",)),
    "elicitation-sep1330-enums": _s(_R25, _R25, ("test_elicitation_sep1330_enums",)),
    "resources-list": _s(_ALL, _RBOTH, ("test://static-text", "test://static-binary",
                                        "test://watched-resource")),
    "resources-read-text": _s(_ALL, _RBOTH, ("test://static-text",)),
    "resources-read-binary": _s(_ALL, _RBOTH, ("test://static-binary",)),
    "resources-templates-read": _s(_ALL, _RBOTH, ("test://template/{id}/data",)),
    "resources-subscribe": _s(_OLD, _R25, ("test://watched-resource",)),
    "resources-unsubscribe": _s(_OLD, _R25, ("test://watched-resource",)),
    "sep-2164-resource-not-found": _s(_NEW, _R26, ()),
    "sep-2640-skills-directory": _s(_EXT, (), _SKILL),
    "sep-2640-skills-enumeration": _s(_EXT, (), _SKILL),
    "sep-2640-skills-manifest": _s(_EXT, (), _SKILL),
    "prompts-list": _s(_ALL, _RBOTH, ()),
    "prompts-get-simple": _s(_ALL, _RBOTH, ("test_simple_prompt",)),
    "prompts-get-with-args": _s(_ALL, _RBOTH, ("test_prompt_with_arguments",)),
    "prompts-get-embedded-resource": _s(_ALL, _RBOTH, ("test_prompt_with_embedded_resource",)),
    "prompts-get-with-image": _s(_ALL, _RBOTH, ("test_prompt_with_image",)),
    "dns-rebinding-protection": _s(_RBOTH, _RBOTH, ()),
    "caching": _s(_NEW, _R26, ("test://static-text",),
                  note="ttlMs/cacheScope on lists and reads come from Server(cache_ttl_ms, "
                       "cache_scope) and the resource's own cache_scope"),
    "http-header-validation": _s(_NEW, (), (),
                                 note="pending in the suite: run but not scored"),
    "http-custom-header-server-validation": _s(
        _NEW, (), ("test_custom_header_param",),
        note="pending in the suite: run but not scored"),
    "tasks-lifecycle": _s(_EXT, (), (*_SLOW, "failing_job", "protocol_error_job")),
    "tasks-capability-negotiation": _s(_EXT, (), _SLOW),
    "tasks-wire-fields": _s(_EXT, (), ("slow_compute",)),
    "tasks-request-state-removal": _s(_EXT, (), ("slow_compute",)),
    "tasks-mrtr-input": _s(_EXT, (), ("confirm_delete", "multi_input")),
    "tasks-request-headers": _s(_EXT, (), _SLOW),
    "tasks-dispatch-and-envelope": _s(_EXT, (), (*_SLOW, "confirm_delete", "failing_job")),
    "tasks-status-notifications": _s(
        _EXT, (), (), "suite placeholder: one SKIPPED check",
        note="notifications/tasks on subscriptions/listen is proven by our own tests"),
    "tasks-required-task-error": _s(_EXT, (), ("failing_job",)),
    "tasks-mrtr-composition": _s(_EXT, (), ("test_tool_with_task",)),
    "input-required-result-basic-elicitation": _s(_NEW, _R26, _ELICIT),
    "input-required-result-basic-sampling": _s(
        _NEW, _R26, ("test_input_required_result_sampling",)),
    "input-required-result-basic-list-roots": _s(
        _NEW, _R26, ("test_input_required_result_list_roots",)),
    "input-required-result-request-state": _s(
        _NEW, _R26, ("test_input_required_result_request_state",)),
    "input-required-result-multiple-input-requests": _s(
        _NEW, _R26, ("test_input_required_result_multiple_inputs",)),
    "input-required-result-multi-round": _s(
        _NEW, _R26, ("test_input_required_result_multi_round",)),
    "input-required-result-missing-input-response": _s(_NEW, _R26, _ELICIT),
    "input-required-result-non-tool-request": _s(
        _NEW, _R26, ("test_input_required_result_prompt",)),
    "input-required-result-result-type": _s(_NEW, _R26, _ELICIT),
    "input-required-result-unsupported-methods": _s(_NEW, _R26, ()),
    "input-required-result-tampered-state": _s(
        _NEW, _R26, ("test_input_required_result_tampered_state",)),
    "input-required-result-capability-check": _s(
        _NEW, _R26, ("test_input_required_result_capabilities",)),
    "input-required-result-ignore-extra-params": _s(_NEW, _R26, _ELICIT),
    "input-required-result-validate-input": _s(_NEW, _R26, _ELICIT),
}
