"""Pure protocol decisions: every branch without a process."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from mcpsync import protocol as p
from mcpsync.errors import (
    HeaderMismatch,
    MissingCapability,
    ProtocolError,
    RemoteError,
    ResourceNotFound,
    UnsupportedProtocolVersion,
    URLElicitationRequired,
)
from mcpsync.types import ServerInfo

CAPS: dict[str, Any] = {"tools": {}}


# --- constants ------------------------------------------------------------------------------

def test_version_constants() -> None:
    assert p.LEGACY_VERSIONS == ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
    assert list(p.LEGACY_VERSIONS) == sorted(p.LEGACY_VERSIONS, reverse=True)
    assert p.MODERN_VERSIONS == ("2026-07-28",)
    assert p.SUPPORTED_VERSIONS == p.MODERN_VERSIONS + p.LEGACY_VERSIONS
    assert p.LEGACY_VERSIONS[0] == p.LATEST_LEGACY
    assert p.MODERN_VERSIONS[0] == p.LATEST_MODERN
    assert p.META_PROTOCOL_VERSION == "io.modelcontextprotocol/protocolVersion"
    assert p.META_SERVER_INFO == "io.modelcontextprotocol/serverInfo"
    assert p.META_SUBSCRIPTION_ID == "io.modelcontextprotocol/subscriptionId"
    assert len(p.LOG_LEVELS) == 8


@pytest.mark.parametrize(("version", "modern"), [
    ("2024-11-05", False), ("2025-11-25", False), ("2026-07-28", True), ("2027-01-01", True)])
def test_is_modern(version: str, modern: bool) -> None:
    assert p.is_modern(version) is modern


# --- logging --------------------------------------------------------------------------------

@pytest.mark.parametrize(("level", "expected"), [
    ("debug", logging.DEBUG), ("info", logging.INFO), ("notice", logging.INFO),
    ("warning", logging.WARNING), ("error", logging.ERROR), ("critical", logging.CRITICAL),
    ("alert", logging.CRITICAL), ("emergency", logging.CRITICAL), ("WARNING", logging.WARNING),
    ("chatty", logging.INFO), (7, logging.INFO),
])
def test_log_level_to_logging(level: Any, expected: int) -> None:
    assert p.log_level_to_logging(level) == expected


def test_every_log_level_is_mapped() -> None:
    levels = [p.log_level_to_logging(level) for level in p.LOG_LEVELS]
    assert levels == sorted(levels)  # severity never goes down along the RFC 5424 order


# --- _meta and capabilities -----------------------------------------------------------------

def test_build_meta_minimal() -> None:
    meta = p.build_meta("2026-07-28", CAPS, {"name": "mcpsync", "version": "0.1.0"})
    assert meta == {
        p.META_PROTOCOL_VERSION: "2026-07-28",
        p.META_CLIENT_CAPABILITIES: CAPS,
        p.META_CLIENT_INFO: {"name": "mcpsync", "version": "0.1.0"},
    }


def test_build_meta_everything_and_passthrough() -> None:
    caller = {"traceparent": "00-abc", p.META_PROTOCOL_VERSION: "1999-01-01"}
    meta = p.build_meta("2026-07-28", {}, None, log_level="debug", progress_token=7,
                        extra=caller)
    assert meta["traceparent"] == "00-abc"
    assert meta[p.META_PROTOCOL_VERSION] == "2026-07-28"  # ours wins
    assert meta[p.META_LOG_LEVEL] == "debug"
    assert meta["progressToken"] == 7
    assert p.META_CLIENT_INFO not in meta
    assert caller == {"traceparent": "00-abc", p.META_PROTOCOL_VERSION: "1999-01-01"}


def test_build_meta_keeps_callers_progress_token_without_ours() -> None:
    meta = p.build_meta("2026-07-28", {}, None, extra={"progressToken": "mine"})
    assert meta["progressToken"] == "mine"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_capabilities_none(era: Any) -> None:
    assert p.client_capabilities(era=era) == {}


def test_capabilities_legacy_all() -> None:
    assert p.client_capabilities(sampling=True, sampling_tools=True, elicitation=True,
                                 elicitation_url=True, roots=True, era="legacy") == {
        "sampling": {"tools": {}},
        "elicitation": {"form": {}, "url": {}},
        "roots": {"listChanged": True},
    }


def test_capabilities_modern_plain() -> None:
    assert p.client_capabilities(sampling=True, elicitation=True, roots=True,
                                 era="modern") == {
        "sampling": {}, "elicitation": {"form": {}}, "roots": {}}


def test_capabilities_refinements_alone_mean_nothing() -> None:
    assert p.client_capabilities(sampling_tools=True, elicitation_url=True, era="legacy") == {}


def test_capabilities_bad_era() -> None:
    with pytest.raises(ValueError, match="era"):
        p.client_capabilities(era="auto")  # type: ignore[arg-type]


# --- era detection --------------------------------------------------------------------------

GOOD_DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}


@pytest.mark.parametrize(("result", "verdict"), [
    (GOOD_DISCOVER, ("modern", "2026-07-28")),
    ({**GOOD_DISCOVER, "supportedVersions": ["2030-01-01", "2026-07-28", "2025-11-25"]},
     ("modern", "2026-07-28")),
    ({}, ("legacy", None)),                                   # the conformance mocks' {}
    (None, ("legacy", None)),
    ([GOOD_DISCOVER], ("legacy", None)),
    ({"capabilities": {}}, ("legacy", None)),                 # no supportedVersions
    ({"supportedVersions": [], "capabilities": {}}, ("legacy", None)),
    ({"supportedVersions": "2026-07-28", "capabilities": {}}, ("legacy", None)),
    ({"supportedVersions": ["2026-07-28", 3], "capabilities": {}}, ("legacy", None)),
    ({"supportedVersions": ["2026-07-28"]}, ("legacy", None)),  # no capabilities
    ({"supportedVersions": ["2026-07-28"], "capabilities": []}, ("legacy", None)),
    ({"supportedVersions": ["2025-11-25"], "capabilities": {}}, ("legacy", None)),
    ({"supportedVersions": ["2031-01-01"], "capabilities": {}}, ("legacy", None)),
])
def test_classify_discover_result(result: Any, verdict: tuple[str, str | None]) -> None:
    assert p.classify_discover_result(result) == verdict


@pytest.mark.parametrize(("code", "data", "verdict"), [
    (-32022, {"supported": ["2026-07-28"], "requested": "2026-07-28"},
     ("retry", "2026-07-28")),                                # even the version we asked for
    (-32022, {"supported": ["2025-11-25", "2026-07-28"]}, ("retry", "2026-07-28")),
    (-32022, {"supported": ["2025-11-25"]}, ("legacy", None)),
    (-32022, {"supported": []}, ("legacy", None)),
    (-32022, {"supported": "2026-07-28"}, ("legacy", None)),
    (-32022, {}, ("legacy", None)),
    (-32022, None, ("legacy", None)),
    (-32601, {"supported": ["2026-07-28"]}, ("legacy", None)),
    (-32602, {"supported": ["2026-07-28"]}, ("legacy", None)),
    (-32021, {"requiredCapabilities": {}}, ("legacy", None)),
    (-32000, None, ("legacy", None)),
    ("-32022", {"supported": ["2026-07-28"]}, ("legacy", None)),
])
def test_classify_discover_error(code: Any, data: Any, verdict: tuple[str, str | None]) -> None:
    assert p.classify_discover_error(code, data) == verdict


@pytest.mark.parametrize(("data", "era", "expected"), [
    ({"supported": ["2024-11-05", "2025-06-18"]}, "legacy", "2025-06-18"),
    ({"supported": ["2026-07-28"]}, "legacy", None),
    ({"supported": ["2026-07-28", "2025-03-26"]}, "modern", "2026-07-28"),
    ({"supported": ["2025-03-26"]}, "modern", None),
    ({"supported": [1, None]}, "legacy", None),
    ({}, "legacy", None),
    ("nope", "modern", None),
])
def test_retry_version_from_error(data: Any, era: Any, expected: str | None) -> None:
    assert p.retry_version_from_error(data, era) == expected


def test_retry_version_bad_era() -> None:
    with pytest.raises(ValueError, match="era"):
        p.retry_version_from_error({}, "auto")  # type: ignore[arg-type]


@pytest.mark.parametrize("version", p.LEGACY_VERSIONS)
def test_choose_legacy_version_accepts_ours(version: str) -> None:
    assert p.choose_legacy_version(version) == version


@pytest.mark.parametrize("answered", ["1999-01-01", "2026-07-28", None, 20251125])
def test_choose_legacy_version_rejects_others(answered: Any) -> None:
    with pytest.raises(UnsupportedProtocolVersion) as info:
        p.choose_legacy_version(answered, server="demo")
    exc = info.value
    assert repr(answered) in str(exc) and "'2025-11-25'" in str(exc)
    assert str(exc).startswith("initializing server 'demo': ")
    assert exc.requested == "2025-11-25" and exc.server == "demo"
    assert exc.method == "initialize"
    assert exc.supported == ([answered] if isinstance(answered, str) else [])


def test_choose_legacy_version_pinned() -> None:
    assert p.choose_legacy_version("2025-03-26", requested="2025-03-26",
                                   pinned=True) == "2025-03-26"
    with pytest.raises(UnsupportedProtocolVersion, match="pinned to '2025-03-26'") as info:
        p.choose_legacy_version("2025-11-25", requested="2025-03-26", pinned=True)
    assert "'2025-11-25'" in str(info.value)


# --- results --------------------------------------------------------------------------------

@pytest.mark.parametrize(("result", "expected"), [
    ({}, "complete"), ({"resultType": None}, "complete"),
    ({"resultType": "complete"}, "complete"),
    ({"resultType": "input_required"}, "input_required"),
    (None, "complete"), ([1], "complete"),
])
def test_result_type(result: Any, expected: str) -> None:
    assert p.result_type(result) == expected


@pytest.mark.parametrize("value", ["task", "COMPLETE", 1, {}])
def test_result_type_unknown(value: Any) -> None:
    with pytest.raises(ProtocolError, match="resultType") as info:
        p.result_type({"resultType": value}, server="demo", method="tools/call")
    assert info.value.server == "demo" and info.value.method == "tools/call"
    assert "'demo'" in str(info.value)


def test_result_type_extension_allowed() -> None:
    assert p.result_type({"resultType": "task"},
                         allowed=("complete", "input_required", "task")) == "task"


def test_server_info_modern_meta_wins() -> None:
    result = {"serverInfo": {"name": "old"}, "instructions": "hi",
              "_meta": {p.META_SERVER_INFO: {"name": "new", "version": "2"}}}
    info = p.server_info_from_result(result, "2026-07-28")
    assert isinstance(info, ServerInfo)
    assert (info.name, info.version, info.protocol_version, info.instructions) == (
        "new", "2", "2026-07-28", "hi")
    assert info.raw == {"name": "new", "version": "2"}


def test_server_info_legacy_fallback() -> None:
    result = {"serverInfo": {"name": "old", "version": "1", "title": "Old"},
              "_meta": {p.META_SERVER_INFO: "garbage"}, "instructions": 5}
    info = p.server_info_from_result(result, "2025-11-25")
    assert (info.name, info.title, info.instructions) == ("old", "Old", None)


@pytest.mark.parametrize("result", [{}, None, {"serverInfo": []}, {"_meta": []}])
def test_server_info_missing(result: Any) -> None:
    info = p.server_info_from_result(result, "2025-06-18")
    assert info.name == "" and info.protocol_version == "2025-06-18"


# --- error messages -------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "params", "server", "expected"), [
    ("tools/call", {"name": "add"}, "demo", "calling tool 'add' on server 'demo'"),
    ("resources/read", {"uri": "file:///a"}, "demo",
     "reading resource 'file:///a' on server 'demo'"),
    ("prompts/get", {"name": "greet"}, "demo", "getting prompt 'greet' on server 'demo'"),
    ("tools/list", None, "demo", "calling 'tools/list' on server 'demo'"),
    ("tools/call", None, "demo", "calling tool '?' on server 'demo'"),
    ("ping", {}, None, "calling 'ping'"),
    ("tools/call", {"name": "add"}, "", "calling tool 'add'"),
])
def test_describe_call(method: str, params: Any, server: str | None, expected: str) -> None:
    assert p.describe_call(method, params, server) == expected


PREFIX = "calling tool 'add' on server 'demo'"


def _err(code: Any, method: str = "tools/call", data: Any = None,
         message: Any = "boom") -> RemoteError:
    return p.remote_error(code, message, data, server="demo", method=method, prefix=PREFIX)


@pytest.mark.parametrize(("code", "method", "cls"), [
    (-32002, "resources/read", ResourceNotFound),
    (-32002, "tools/call", ResourceNotFound),
    (-32602, "resources/read", ResourceNotFound),
    (-32602, "tools/call", RemoteError),
    (-32020, "tools/call", HeaderMismatch),
    (-32042, "tools/call", URLElicitationRequired),
    (-32021, "tools/call", MissingCapability),
    (-32601, "tools/call", RemoteError),
    (-32000, "tools/call", RemoteError),
    (-1, "sampling/createMessage", RemoteError),
])
def test_remote_error_class(code: int, method: str, cls: type[RemoteError]) -> None:
    exc = _err(code, method)
    assert type(exc) is cls
    assert exc.code == code and exc.remote_message == "boom"
    assert exc.server == "demo" and exc.method == method
    assert str(exc).startswith(f"{PREFIX}: boom (code {code})")


def test_remote_error_plain_has_no_hint() -> None:
    exc = _err(-32000, data={"x": 1})
    assert str(exc) == f"{PREFIX}: boom (code -32000)"
    assert exc.data == {"x": 1}


@pytest.mark.parametrize(("code", "method", "data", "hint"), [
    (-32601, "tools/call", None, "does not implement 'tools/call'"),
    (-32601, None, None, "does not implement that method"),
    (-32602, "tools/call", None, "inputSchema"),
    (-32602, "prompts/get", None, "list_prompts()"),
    (-32602, "resources/read", None, "no resource at that URI"),
    (-32002, "resources/read", None, "no resource at that URI"),
    (-32002, "tools/call", None, "no such resource"),
    (-32021, "tools/call", {"requiredCapabilities": {"sampling": {}}},
     "{'sampling': {}}; pass the matching callback"),
    (-32021, "tools/call", None, "needs client capabilities; pass"),
    (-32042, "tools/call", None, ".elicitations"),
    (-32022, "tools/call", {"supported": ["2026-07-28"]}, "speaks ['2026-07-28']"),
    (-32020, "tools/call", None, "HTTP header"),
    (-1, "sampling/createMessage", None, "rejected"),
])
def test_remote_error_hints(code: int, method: str | None, data: Any, hint: str) -> None:
    exc = p.remote_error(code, "boom", data, server="demo", method=method, prefix=PREFIX)
    assert f"(code {code}); " in str(exc)
    assert hint in str(exc)


def test_remote_error_unsupported_version_without_data_has_no_hint() -> None:
    assert str(_err(-32022)) == f"{PREFIX}: boom (code -32022)"


def test_remote_error_url_elicitation_carries_elicitations() -> None:
    data = {"elicitations": [{"mode": "url", "url": "https://x", "elicitationId": "e"}]}
    exc = _err(-32042, data=data)
    assert isinstance(exc, URLElicitationRequired)
    assert exc.elicitations == data["elicitations"]


def test_remote_error_missing_capability_names_them() -> None:
    exc = _err(-32021, data={"requiredCapabilities": {"elicitation": {}}})
    assert isinstance(exc, MissingCapability)
    assert exc.required_capabilities == {"elicitation": {}}


@pytest.mark.parametrize(("message", "shown"), [("", "(no message)"), (None, "None"),
                                                ({"a": 1}, "{'a': 1}")])
def test_remote_error_odd_messages(message: Any, shown: str) -> None:
    exc = _err(-32000, message=message)
    assert str(exc) == f"{PREFIX}: {shown} (code -32000)"


@pytest.mark.parametrize("code", ["oops", None, 1.5, True])
def test_remote_error_non_integer_code(code: Any) -> None:
    exc = _err(code)
    assert type(exc) is RemoteError
    assert exc.code == -32603
    assert f"(code {code!r})" in str(exc)
