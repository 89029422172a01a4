"""ClientOptions: the one definition of connect()'s options, against the real demo server."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

import mcpsync
from mcpsync.client._connect import CREDENTIALS, PER_SERVER
from mcpsync.client._connect_keywords import ConnectKeywords

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]

#: Every keyword connect() took before it accepted a ClientOptions; all must keep working.
KEYWORDS_BEFORE = {
    "name", "timeout", "max_timeout", "reset_timeout_on_progress", "era", "protocol_version",
    "probe_timeout", "max_frame_bytes", "env", "inherit_env", "cwd", "stderr_bytes",
    "on_stderr", "die_with_parent", "restart", "sampling", "elicitation", "roots", "on_log",
    "on_notification", "notification_observer", "on_connection_lost", "log_level",
    "client_info", "max_pages", "max_input_rounds", "validate_output", "headers", "auth",
    "session", "authorization", "on_unauthorized", "transport", "validate_input", "stderr",
}


def _fields() -> set[str]:
    return {f.name for f in dataclasses.fields(mcpsync.ClientOptions)}


def test_the_typed_keywords_are_the_options_plus_the_per_server_ones() -> None:
    assert set(ConnectKeywords.__annotations__) == _fields() | set(PER_SERVER)
    assert set(ConnectKeywords.__annotations__) == KEYWORDS_BEFORE


def test_client_options_carry_no_credentials_or_server_identity() -> None:
    assert _fields().isdisjoint(CREDENTIALS)
    assert _fields().isdisjoint({"name", "env", "cwd", "transport"})
    assert mcpsync.client.ClientOptions is mcpsync.ClientOptions
    assert "ClientOptions" in mcpsync.__all__


def test_client_options_are_frozen_and_have_connects_defaults() -> None:
    options = mcpsync.ClientOptions()
    assert (options.era, options.restart, options.max_pages, options.client_info) == (
        "auto", "on_demand", 100, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.era = "legacy"  # type: ignore[misc]


@pytest.mark.parametrize(("given", "named"), [
    ({"era": "ancient"}, "era"), ({"protocol_version": "2020-01-01"}, "protocol_version"),
    ({"timeout": 0}, "timeout"), ({"max_pages": 0}, "max_pages"),
    ({"restart": "always"}, "restart"), ({"log_level": "loud"}, "log_level"),
    ({"client_info": 3}, "client_info"), ({"probe_timeout": float("nan")}, "probe_timeout"),
])
def test_a_bad_option_fails_when_built_and_names_itself(given: dict[str, Any],
                                                         named: str) -> None:
    with pytest.raises(mcpsync.ConfigError, match=f"invalid option: {named}"):
        mcpsync.ClientOptions(**given)
    with pytest.raises(mcpsync.ConfigError, match=f"invalid option: {named}"):
        mcpsync.connect(DEMO, mcpsync.ClientOptions(), **given)  # checked before spawning


def test_connect_takes_options_and_keywords_replace_their_fields() -> None:
    options = mcpsync.ClientOptions(era="legacy", timeout=7)
    with mcpsync.connect(DEMO, options) as client:
        assert client.era == "legacy"
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
    with mcpsync.connect(DEMO, options, era="auto", protocol_version="2026-07-28",
                         name="over") as client:
        assert (client.era, client.protocol_version) == ("modern", "2026-07-28")
        assert client.name == "over"
    assert options.era == "legacy"  # the value given is never changed


def test_connect_refuses_an_unknown_keyword_and_a_wrong_options_value() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'eras'"):
        mcpsync.connect(DEMO, eras="legacy")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="options must be a ClientOptions"):
        mcpsync.connect(DEMO, {"era": "legacy"})  # type: ignore[arg-type]


def test_manager_accepts_client_options() -> None:
    config = mcpsync.ServerConfig(id="demo", command=sys.executable, args=["-m", "mcpsync.demo"])
    with mcpsync.Manager(configs=[config],
                         connect_options=mcpsync.ClientOptions(era="legacy")) as manager:
        manager.start_all()
        assert manager.client("demo").era == "legacy"
    with pytest.raises(ValueError, match="notification_observer"):
        mcpsync.Manager(connect_options=mcpsync.ClientOptions(notification_observer=print))
    with pytest.raises(TypeError, match="connect_options must be a ClientOptions"):
        mcpsync.Manager(connect_options=42)  # type: ignore[arg-type]


def _generated_twin() -> type:
    """ClientOptions as the plain ``@dataclass(frozen=True)`` it was: the same fields,
    defaults, annotations and ``__post_init__``, with every method generated."""
    import mcpsync.client._options as module

    namespace: dict[str, Any] = {
        "__annotations__": {f.name: f.type for f in dataclasses.fields(mcpsync.ClientOptions)},
        "__post_init__": mcpsync.ClientOptions.__post_init__,
        "__module__": module.__name__, "__qualname__": "ClientOptions",
        **{f.name: f.default for f in dataclasses.fields(mcpsync.ClientOptions)},
    }
    return dataclasses.dataclass(frozen=True)(type("ClientOptions", (), namespace))


def test_the_written_methods_do_what_the_generated_ones_did() -> None:
    import copy
    import inspect
    import pickle

    twin = _generated_twin()
    ours = mcpsync.ClientOptions
    assert inspect.signature(ours) == inspect.signature(twin)
    assert [(p.name, p.default, p.annotation, p.kind)
            for p in inspect.signature(ours.__init__).parameters.values()] == [
        (p.name, p.default, p.annotation, p.kind)
        for p in inspect.signature(twin.__init__).parameters.values()]
    assert ours.__match_args__ == twin.__match_args__
    values: list[dict[str, Any]] = [
        {}, {"timeout": 2.5, "era": "legacy", "stderr": "show", "restart": None},
        {"client_info": {"name": "x"}, "on_log": print, "log_level": "debug", "max_pages": 3},
    ]
    for given in values:
        a, b = ours(**given), twin(**given)
        assert repr(a) == repr(b)
        assert [getattr(a, f.name) for f in dataclasses.fields(ours)] == [
            getattr(b, f.name) for f in dataclasses.fields(twin)]
        assert a == ours(**given) and a == dataclasses.replace(a) == copy.deepcopy(a)
        assert (a != ours(max_pages=7)) and a.__eq__(b) is NotImplemented
        try:
            expected: object = hash(b)
        except TypeError as exc:   # a dict in client_info: unhashable, as before
            expected = type(exc)
            with pytest.raises(TypeError):
                hash(a)
        else:
            assert hash(a) == expected
        assert pickle.loads(pickle.dumps(a)) == a if "on_log" not in given else True
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.timeout = 1.0  # type: ignore[misc]
    positional = [f.default for f in dataclasses.fields(ours)]
    assert ours(*positional) == ours() and repr(twin(*positional)) == repr(ours())
    with pytest.raises(mcpsync.errors.ConfigError):   # __post_init__ still runs
        ours(era="nope")
    with pytest.raises(TypeError):
        ours(nope=1)  # type: ignore[call-arg]
