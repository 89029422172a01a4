"""The error hierarchy: every class pickles with its attributes, and the stdlib mix-ins hold.

Celery and multiprocessing carry exceptions between processes by pickling them, so a class
whose attributes are lost (or whose ``__init__`` cannot be re-run with ``args``) breaks
those users silently. Each class is checked by introspection, so a new class without a
case here fails the coverage test instead of going untested.
"""

from __future__ import annotations

import builtins
import concurrent.futures
import inspect
import pickle
from typing import Any

import pytest

from mcpsync import errors
from mcpsync.errors import MCPError

COMMON = {"server": "demo", "method": "tools/call"}

# Keyword arguments beyond message/server/method, per class, each set to a non-default value.
EXTRA_KWARGS: dict[str, dict[str, Any]] = {
    "MCPError": {},
    "ProtocolError": {},
    "RemoteError": {"code": -32000, "remote_message": "boom", "data": {"k": [1, 2]}},
    "ResourceNotFound": {"code": -32002, "remote_message": "nope", "data": {"uri": "x://y"}},
    "HeaderMismatch": {"code": -32020, "remote_message": "hdr", "data": None},
    "URLElicitationRequired": {
        "code": -32042, "remote_message": "visit",
        "data": {"elicitations": [{"mode": "url", "url": "https://e.example",
                                   "elicitationId": "e1", "message": "m"}]},
    },
    "MissingCapability": {"code": -32021, "remote_message": "need",
                          "data": {"requiredCapabilities": {"sampling": {}}}},
    "ConnectionLost": {"maybe_executed": True},
    "ServerExited": {"exit_code": -9, "stderr_tail": "Traceback...\nboom\n",
                     "maybe_executed": True},
    "SessionExpired": {"maybe_executed": True},
    "ConnectFailed": {"url": "http://127.0.0.1:9/mcp"},
    "RequestTimeout": {"timeout": 2.5},
    "Cancelled": {},
    "UnsupportedProtocolVersion": {"requested": "2025-11-25", "supported": ["1999-01-01"]},
    "UnsupportedInThisEra": {},
    "CapabilityNotSupported": {},
    "TransportError": {},
    "Unauthorized": {"www_authenticate": 'Bearer realm="x"', "status": 401},
    "AuthHookError": {},
    "ToolError": {"result": {"content": [], "isError": True}},
    "OutputValidationError": {"result": {"structuredContent": 1}},
    "SkillVerificationError": {"uri": "skill://notes/SKILL.md"},
    "TooManyPages": {},
    "InputRoundsExceeded": {},
    "ConfigError": {},
    "ClosedError": {},
    "Rejected": {},
    "UsedAfterFork": {},
    "UnknownServer": {},
    "UnknownTool": {"name": "ad", "suggestions": ("add",)},
    "InvalidArguments": {"missing": ("b",), "unexpected": ()},
    "SecretError": {"ref": "vault:github"},
    "PolicyRefused": {"tool": "t", "rule": "allow", "local": False},
    "PolicyDenied": {"tool": "t", "rule": "allow"},
    "ApprovalRejected": {"tool": "t", "rule": "approve"},
    "BudgetExceeded": {"tool": "t", "rule": "budget s/t=3", "retry_after": 1.5},
}


def test_policy_refusal_codes() -> None:
    assert errors.PolicyDenied.gateway_code == -32010
    assert errors.ApprovalRejected.gateway_code == -32011
    assert errors.BudgetExceeded.gateway_code == -32012
    exc = errors.BudgetExceeded("no", tool="t", server="s")
    assert exc.local is True and not isinstance(exc, errors.RemoteError)


def test_unknown_server_is_a_key_error_with_a_plain_message() -> None:
    exc = errors.UnknownServer("no server 'x' is started", server="x")
    assert isinstance(exc, KeyError) and str(exc) == "no server 'x' is started"


def _error_classes() -> list[type[MCPError]]:
    return [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
            if issubclass(obj, MCPError) and obj.__module__ == errors.__name__]


def test_every_error_class_has_a_pickle_case() -> None:
    names = {cls.__name__ for cls in _error_classes()}
    assert names == set(EXTRA_KWARGS), (
        f"missing cases: {sorted(names - set(EXTRA_KWARGS))}, "
        f"stale cases: {sorted(set(EXTRA_KWARGS) - names)}")


def test_every_error_class_is_exported() -> None:
    assert {cls.__name__ for cls in _error_classes()} <= set(errors.__all__)


@pytest.mark.parametrize("name", sorted(EXTRA_KWARGS))
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_pickle_round_trip_keeps_attributes(name: str, protocol: int) -> None:
    cls = getattr(errors, name)
    message = f"calling tool 'add' on server 'demo': {name} happened"
    exc = cls(message, **COMMON, **EXTRA_KWARGS[name])
    clone = pickle.loads(pickle.dumps(exc, protocol=protocol))
    assert type(clone) is cls
    assert str(clone) == str(exc) == message
    assert clone.args == exc.args
    assert clone.server == "demo"
    assert clone.method == "tools/call"
    for attr, value in EXTRA_KWARGS[name].items():
        assert getattr(clone, attr) == value, attr
    # Re-raising the clone behaves like the original.
    with pytest.raises(cls) as info:
        raise clone
    assert info.value.message == message


def test_pickle_round_trip_of_defaults() -> None:
    for cls in _error_classes():
        clone = pickle.loads(pickle.dumps(cls()))
        assert type(clone) is cls
        assert clone.server is None and clone.method is None
        assert str(clone) == ""


def test_pickled_derived_properties_survive() -> None:
    url = pickle.loads(pickle.dumps(errors.URLElicitationRequired(
        "x", **EXTRA_KWARGS["URLElicitationRequired"])))
    assert url.elicitations[0]["elicitationId"] == "e1"
    missing = pickle.loads(pickle.dumps(errors.MissingCapability(
        "x", **EXTRA_KWARGS["MissingCapability"])))
    assert missing.required_capabilities == {"sampling": {}}


def test_stdlib_mixins() -> None:
    assert issubclass(errors.RequestTimeout, TimeoutError)
    assert issubclass(errors.ConnectionLost, ConnectionError)
    assert issubclass(errors.ServerExited, ConnectionError)
    assert issubclass(errors.SessionExpired, errors.ConnectionLost)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.Cancelled, concurrent.futures.CancelledError)
    for sub in ("ResourceNotFound", "HeaderMismatch", "URLElicitationRequired",
                "MissingCapability"):
        assert issubclass(getattr(errors, sub), errors.RemoteError)
    for cls in _error_classes():
        assert issubclass(cls, MCPError)
        assert not issubclass(cls, getattr(builtins, "BaseExceptionGroup", ()))


def test_stdlib_except_clauses_catch_them() -> None:
    with pytest.raises(TimeoutError):
        raise errors.RequestTimeout("t", timeout=1.0)
    with pytest.raises(ConnectionError):
        raise errors.ServerExited("gone", exit_code=1)
    with pytest.raises(ValueError, match="bad field"):
        raise errors.ConfigError("bad field")
    with pytest.raises(concurrent.futures.CancelledError):
        raise errors.Cancelled("stop")


def test_message_property_and_str_have_no_class_name() -> None:
    exc = errors.RemoteError("calling 'x': boom (code 1)", code=1)
    assert exc.message == str(exc) == "calling 'x': boom (code 1)"
    assert "RemoteError" in repr(exc)


def test_url_elicitation_tolerates_odd_data() -> None:
    assert errors.URLElicitationRequired("x", data=None).elicitations == []
    assert errors.URLElicitationRequired("x", data={"elicitations": 3}).elicitations == []
    assert errors.MissingCapability("x", data=[1]).required_capabilities is None
