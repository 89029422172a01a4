"""The ``mcpsync`` key of a gateway config file: the policy, budgets and approval settings.

It sits next to ``mcpServers`` (which every other reader of the file ignores it beside), and
it is read strictly: an unknown key or a value of the wrong type is a
:class:`~mcpsync.errors.ConfigError` naming the file and the key, because a typo in a deny
rule must not silently let a tool through. The schema (see ``docs/gateway-guard.md``)::

    "mcpsync": {
      "deny": ["files/delete*"],                 # globs over "server/tool"
      "allow": ["*/read_*", "demo/*"],           # only these (deny wins)
      "arguments": [{"tool": "files/write", "argument": "path", "matches": "/tmp/*"}],
      "require_approval": ["files/move*"],
      "budgets": {"*": {"calls": 100, "window": 3600}, "demo": 20, "demo/slow":
                  {"seconds": 30, "window": 60}},
      "approval": {"hold_seconds": 25, ...}      # the approver's own keys pass through
    }
"""

from __future__ import annotations

import importlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mcpsync.errors import ConfigError
from mcpsync.policy import Policy

__all__ = ["GuardSettings", "read_guard_settings"]

KEY: Final = "mcpsync"
_TOP: Final = ("allow", "approval", "arguments", "budgets", "deny", "require_approval")
_ARGUMENT_KEYS: Final = ("argument", "equals", "in", "matches", "max_length", "tool")
_BUDGET_KEYS: Final = ("calls", "cost", "seconds", "window")
_DEFAULT_HOLD: Final = 25.0


@dataclass(frozen=True)
class GuardSettings:
    """What the ``mcpsync`` key asks for: the policy, how long a call is held, and the
    ``approval`` section for the approver (tty, web page, command hook)."""

    policy: Policy | None = None
    hold_seconds: float = _DEFAULT_HOLD
    approval: Mapping[str, Any] = field(default_factory=dict)
    source: str = "the gateway config"


def _type_name(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null", int: "a number", float: "a number"}.get(type(value),
                                                                        type(value).__name__)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where}: {what}")

    def globs(self, where: str, value: object) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(where, f"expected a list of globs such as \"files/delete*\", got "
                                   f"{_type_name(value)}")
        return list(value)

    def number(self, where: str, value: object, *, integer: bool = False,
               positive: bool = False) -> float:
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok \
                or not math.isfinite(value) or value < 0 or (positive and value == 0):
            kind = "an integer" if integer else "a number"
            shown = json.dumps(value) if _jsonable(value) else repr(value)
            raise self.fail(where, f"expected {kind} {'> 0' if positive else '>= 0'}, got "
                                   f"{shown}")
        return float(value)

    def strict(self, where: str, value: object, known: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected an object, got {_type_name(value)}")
        for key in value:
            if key not in known:
                raise self.fail(f"{where}.{key}", f"unknown key (known: {', '.join(known)})")
        return value

    def argument_rule(self, where: str, value: object) -> dict[str, Any]:
        rule = dict(self.strict(where, value, _ARGUMENT_KEYS))
        for key in ("tool", "argument"):
            if not isinstance(rule.get(key), str) or not rule[key]:
                raise self.fail(f"{where}.{key}", "required: a non-empty string")
        if "matches" in rule and not isinstance(rule["matches"], str):
            raise self.fail(f"{where}.matches", f"expected a glob string, got "
                                                f"{_type_name(rule['matches'])}")
        if "in" in rule and not isinstance(rule["in"], list):
            raise self.fail(f"{where}.in", f"expected a list of values, got "
                                           f"{_type_name(rule['in'])}")
        if "max_length" in rule:
            self.number(f"{where}.max_length", rule["max_length"], integer=True)
        if not any(k in rule for k in ("matches", "equals", "in", "max_length")):
            raise self.fail(where, "give at least one of matches, equals, in, max_length")
        return rule

    def budget(self, where: str, value: object) -> int | dict[str, Any]:
        if isinstance(value, int) and not isinstance(value, bool):
            return int(self.number(where, value, integer=True))
        budget = dict(self.strict(where, value, _BUDGET_KEYS))
        if "calls" in budget:
            budget["calls"] = int(self.number(f"{where}.calls", budget["calls"], integer=True))
        for key in ("seconds", "cost"):
            if key in budget:
                budget[key] = self.number(f"{where}.{key}", budget[key])
        if "window" in budget:
            budget["window"] = self.number(f"{where}.window", budget["window"], positive=True)
        if not any(k in budget for k in ("calls", "seconds", "cost")):
            raise self.fail(where, "give at least one of calls, seconds, cost")
        return budget


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def guard_settings(section: object, source: str) -> GuardSettings:
    """The settings of an ``mcpsync`` key's value (already parsed)."""
    read = _Reader(source)
    top = read.strict(KEY, section, _TOP)
    options: dict[str, Any] = {}
    for key in ("deny", "allow", "require_approval"):
        if key in top:
            options[key] = read.globs(f"{KEY}.{key}", top[key])
    if "arguments" in top:
        rules = top["arguments"]
        if not isinstance(rules, list):
            raise read.fail(f"{KEY}.arguments", f"expected a list of rules, got "
                                                f"{_type_name(rules)}")
        options["arguments"] = [read.argument_rule(f"{KEY}.arguments[{i}]", r)
                                for i, r in enumerate(rules)]
    if "budgets" in top:
        budgets = top["budgets"]
        if not isinstance(budgets, Mapping):
            raise read.fail(f"{KEY}.budgets", f"expected an object of budgets, got "
                                              f"{_type_name(budgets)}")
        options["budgets"] = {key: read.budget(f"{KEY}.budgets[{json.dumps(key)}]", value)
                              for key, value in budgets.items()}
    approval: Mapping[str, Any] = {}
    hold = _DEFAULT_HOLD
    if "approval" in top:
        approval = top["approval"]
        if not isinstance(approval, Mapping):
            raise read.fail(f"{KEY}.approval", f"expected an object, got "
                                               f"{_type_name(approval)}")
        if "hold_seconds" in approval:
            hold = read.number(f"{KEY}.approval.hold_seconds", approval["hold_seconds"],
                               positive=True)
    try:
        policy = Policy(**options) if options else None
    except (TypeError, ValueError) as exc:
        raise read.fail(KEY, str(exc)) from None
    return GuardSettings(policy, hold, dict(approval), source)


def read_guard_settings(config: str | os.PathLike[str] | Mapping[str, Any]) -> GuardSettings:
    """The ``mcpsync`` key of a config file (a path, or the parsed document); defaults when
    the file has none. The file is read as :func:`~mcpsync.config_files.load_config` reads
    it (comments and trailing commas allowed)."""
    if isinstance(config, Mapping):
        source, document = "the gateway config", config
    else:
        importlib.import_module("mcpsync.config_files")
        from mcpsync.config_files import _read_file

        source = os.fspath(config)
        document = _read_file(source)
    if not isinstance(document, Mapping) or KEY not in document:
        return GuardSettings(source=source)
    return guard_settings(document[KEY], source)
