"""The tool-call policy shared by the Manager and the gateway: which tools may be called, with
which arguments, how often, and which need a human's approval first.

A host that lets a model call tools needs a place to say "not this tool", "only under /tmp",
"not more than N calls a minute" and "ask a human first". :class:`Policy` holds those rules.
The Manager runs them on the caller's thread before anything is sent, so a refusal is a local
exception that can never be mistaken for a server's answer; the gateway runs the same rules
for its hosts and answers with the gateway codes -32010…-32012.

The checks run in a fixed order: ``deny`` globs, then ``allow`` (globs or a callback), then
the argument rules, then the budgets, then approval. The first that refuses wins, so a tool
both denied and allowed is denied.

Servers configured with ``gateway=True`` apply such rules themselves; :func:`gateway_refusal`
turns their answers into the same exception classes, with ``local=False``.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpsync._budget_ledger import BudgetLedger, Charge, Spent
from mcpsync._gateway_refusal import gateway_refusal as gateway_refusal
from mcpsync.errors import (
    ApprovalRejected,
    BudgetExceeded,
    PolicyDenied,
    PolicyRefused,
)

__all__ = ["ArgumentRule", "Budget", "Decision", "Policy", "check_call", "decide",
           "finish_call", "gateway_refusal", "tool_matches"]

Rule = Callable[[str, str, Mapping[str, Any]], bool]
"""``rule(server_id, tool, args) -> bool``: True lets the call through."""

CostFunction = Callable[[str, str, Mapping[str, Any]], float]
"""``cost(server_id, tool, args) -> float``: what one call costs, counted before it is sent."""

#: The budget key that counts every call of a caller (its session).
ALL_CALLS = "*"

_CONDITIONS = ("matches", "equals", "one_of", "max_length", "check")
#: ``ArgumentRule.equals`` when no value is required (``equals=None`` requires JSON null).
_UNSET: Any = type("NotGiven", (), {"__repr__": lambda self: "_UNSET"})()


def tool_matches(pattern: str, server_id: str, tool: str) -> bool:
    """Whether a glob names this tool: ``server/tool`` (``"files/delete*"``, ``"*/read_*"``),
    or without a slash the tool's name on any server (``"delete*"``). Case-sensitive."""
    if "/" in pattern:
        return fnmatch.fnmatchcase(f"{server_id}/{tool}", pattern)
    return fnmatch.fnmatchcase(tool, pattern)


def _globs(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"Policy.{name} must be a list of globs such as 'files/delete*', "
                        f"got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str) or not item:
            raise ValueError(f"Policy.{name}: {item!r} is not a glob (a non-empty string "
                             "such as 'files/delete*' or '*/read_*')")
    return tuple(value)


@dataclass(frozen=True)
class Budget:
    """What one budget key allows within ``window`` seconds (None: until reset).

    ``calls``: calls sent; ``seconds``: wall time of finished calls (a call that starts
    with time left runs to its end); ``cost``: the sum of :attr:`Policy.cost` of the calls.
    Any of them may be None (no limit on it); at least one is set.
    """

    calls: int | None = None
    seconds: float | None = None
    cost: float | None = None
    window: float | None = None

    def __post_init__(self) -> None:
        if self.calls is not None and (isinstance(self.calls, bool)
                                       or not isinstance(self.calls, int) or self.calls < 0):
            raise ValueError(f"Budget.calls must be an int >= 0, got {self.calls!r}")
        for name in ("seconds", "cost", "window"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0 or (name == "window"
                                                                 and value == 0):
                raise ValueError(f"Budget.{name} must be a finite number "
                                 f"{'> 0' if name == 'window' else '>= 0'}, got {value!r}")
        if self.calls is None and self.seconds is None and self.cost is None:
            raise ValueError("a Budget needs at least one of calls, seconds or cost")


@dataclass(frozen=True)
class ArgumentRule:
    """A condition on one argument of the tools that ``tool`` (a glob) names.

    The call is refused unless the argument is present and meets every condition given:
    ``matches`` (a glob the string value must match), ``equals`` (the exact value),
    ``one_of`` (one of these values), ``max_length`` (of a string or a list), ``check``
    (a predicate on the value). A missing argument is refused: a rule that limits ``path``
    must not be passed by leaving ``path`` out.
    """

    tool: str
    argument: str
    matches: str | None = None
    equals: Any = _UNSET
    one_of: Sequence[Any] | None = None
    max_length: int | None = None
    check: Callable[[Any], bool] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise ValueError(f"ArgumentRule.tool must be a glob such as 'files/write', "
                             f"got {self.tool!r}")
        if not isinstance(self.argument, str) or not self.argument:
            raise ValueError(f"ArgumentRule.argument must be an argument name, got "
                             f"{self.argument!r}")
        if self.matches is not None and not isinstance(self.matches, str):
            raise TypeError("ArgumentRule.matches must be a glob string")
        if self.one_of is not None:
            if isinstance(self.one_of, str) or not isinstance(self.one_of, Sequence):
                raise TypeError("ArgumentRule.one_of must be a list of values")
            object.__setattr__(self, "one_of", tuple(self.one_of))
        if self.max_length is not None and (isinstance(self.max_length, bool) or not
                                            isinstance(self.max_length, int)
                                            or self.max_length < 0):
            raise ValueError("ArgumentRule.max_length must be an int >= 0")
        if self.check is not None and not callable(self.check):
            raise TypeError("ArgumentRule.check must be callable")
        if self.equals is _UNSET and all(getattr(self, name) is None
                                        for name in _CONDITIONS if name != "equals"):
            raise ValueError(f"ArgumentRule for {self.tool!r}.{self.argument}: give at least "
                             "one of matches, equals, one_of, max_length or check")

    def applies(self, server_id: str, tool: str) -> bool:
        return tool_matches(self.tool, server_id, tool)

    def allows(self, args: Mapping[str, Any]) -> str | None:
        """None when the arguments pass, else why not (never quoting the value)."""
        if self.argument not in args:
            return f"the argument {self.argument!r} is required by this rule"
        value = args[self.argument]
        if self.matches is not None and (not isinstance(value, str)
                                         or not fnmatch.fnmatchcase(value, self.matches)):
            return f"the argument {self.argument!r} does not match {self.matches!r}"
        if self.equals is not _UNSET and not _same(value, self.equals):
            return f"the argument {self.argument!r} is not the allowed value"
        if self.one_of is not None and not any(_same(value, v) for v in self.one_of):
            return f"the argument {self.argument!r} is not one of the allowed values"
        if self.max_length is not None and (not isinstance(value, (str, list))
                                            or len(value) > self.max_length):
            return f"the argument {self.argument!r} is longer than {self.max_length}"
        if self.check is not None and not self.check(value):
            return f"the argument {self.argument!r} failed the rule's check"
        return None


def _same(a: Any, b: Any) -> bool:
    # JSON has no bool/int confusion: true is not 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) \
        else a == b


def _argument_rule(index: int, value: object) -> ArgumentRule:
    if isinstance(value, ArgumentRule):
        return value
    if isinstance(value, Mapping):
        known = {"tool", "argument", "matches", "equals", "in", "one_of", "max_length"}
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise ValueError(f"Policy.arguments[{index}]: unknown key(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        options = {k: v for k, v in value.items() if k != "in"}
        if "in" in value:
            options["one_of"] = value["in"]
        try:
            return ArgumentRule(**options)
        except TypeError as exc:
            raise ValueError(f"Policy.arguments[{index}]: {exc}") from None
    raise TypeError(f"Policy.arguments[{index}] must be an ArgumentRule or a mapping, got "
                    f"{type(value).__name__}")


def _budget(key: str, value: object) -> Budget:
    if isinstance(value, Budget):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, Mapping)):
        raise ValueError(f"Policy.budgets[{key!r}] must be an int >= 0 (a number of calls), "
                         f"a Budget or a mapping, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"Policy.budgets[{key!r}] must be an int >= 0, got {value!r}")
        return Budget(calls=value)
    unknown = sorted(str(k) for k in value if k not in ("calls", "seconds", "cost", "window"))
    if unknown:
        raise ValueError(f"Policy.budgets[{key!r}]: unknown key(s) {', '.join(unknown)} "
                         "(known: calls, seconds, cost, window)")
    try:
        return Budget(**value)
    except ValueError as exc:
        raise ValueError(f"Policy.budgets[{key!r}]: {exc}") from None


@dataclass(frozen=True)
class Policy:
    """The rules checked before every tool call (by the Manager, or by a gateway).

    Tools are named by globs over ``server/tool`` (see :func:`tool_matches`).

    - ``deny``: globs of tools never called (and hidden from a gateway's lists).
    - ``allow``: a callback ``allow(server_id, tool, args) -> bool``, or globs: then only
      the tools they name are called (the others hidden from a gateway's lists). Deny wins.
      A refusal is :class:`~mcpsync.errors.PolicyDenied`.
    - ``arguments``: :class:`ArgumentRule` objects (or mappings with the same keys, ``in``
      for ``one_of``), each a condition on an argument's value; refusals are ``PolicyDenied``.
    - ``budgets``: ``{key: limit}`` where key is ``"server_id"``, ``"server_id/tool"`` or
      ``"*"`` (every call), and limit a number of calls or a :class:`Budget` (calls, wall
      time, cost, window; a mapping with those keys works too). Use is counted per caller
      (the Manager is one caller; the gateway counts per host session) since the window
      started, or since the Manager was made or ``reset_budgets()``; every key that names
      the call applies. A spent budget refuses with :class:`~mcpsync.errors.BudgetExceeded`.
    - ``cost``: ``cost(server_id, tool, args) -> float``, what a call costs against the
      budgets' ``cost`` limits.
    - ``require_approval``: globs of the tools that need approval; None (the default) means
      every call when ``approve`` is set.
    - ``approve(server_id, tool, args) -> bool``: the approver. The Manager calls it last, on
      the caller's thread, so it may block while a human decides; False refuses with
      :class:`~mcpsync.errors.ApprovalRejected`, and so does a call that needs approval
      when there is no approver.
    """

    allow: Rule | Sequence[str] | None = None
    approve: Rule | None = None
    budgets: Mapping[str, int | Budget | Mapping[str, Any]] | None = None
    deny: Sequence[str] = ()
    arguments: Sequence[ArgumentRule | Mapping[str, Any]] = ()
    require_approval: Sequence[str] | None = None
    cost: CostFunction | None = None

    def __post_init__(self) -> None:
        if self.allow is not None and not callable(self.allow):
            object.__setattr__(self, "allow", _globs("allow", self.allow))
        for name in ("approve", "cost"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"Policy.{name} must be callable, got {type(value).__name__}")
        object.__setattr__(self, "deny", _globs("deny", self.deny))
        if self.require_approval is not None:
            object.__setattr__(self, "require_approval",
                               _globs("require_approval", self.require_approval))
        if isinstance(self.arguments, (str, Mapping)) or not isinstance(self.arguments,
                                                                         Sequence):
            raise TypeError("Policy.arguments must be a list of ArgumentRule (or mappings)")
        object.__setattr__(self, "arguments", tuple(
            _argument_rule(i, rule) for i, rule in enumerate(self.arguments)))
        if self.budgets is not None:
            if not isinstance(self.budgets, Mapping):
                raise TypeError("Policy.budgets must be a mapping of 'server', "
                                "'server/tool' or '*' to a number of calls or a Budget")
            limits: dict[str, Budget] = {}
            for key, limit in self.budgets.items():
                if not isinstance(key, str) or not key:
                    raise ValueError(f"Policy.budgets: invalid key {key!r}")
                limits[key] = _budget(key, limit)
            # A private copy: the caller's dict may change after the Policy was built.
            object.__setattr__(self, "budgets", dict(self.budgets))
            object.__setattr__(self, "_limits", limits)
        else:
            object.__setattr__(self, "_limits", {})

    def visible(self, server_id: str, tool: str) -> bool:
        """Whether a tool may be listed: not denied and, with allow globs, allowed. Callbacks
        and argument rules depend on the arguments, so they never hide a tool."""
        return self._denied_by_name(server_id, tool) is None

    def needs_approval(self, server_id: str, tool: str) -> str | None:
        """The approval rule that holds this call, or None."""
        if self.require_approval is None:
            return "approve" if self.approve is not None else None
        for pattern in self.require_approval:
            if tool_matches(pattern, server_id, tool):
                return f"require_approval[{pattern!r}]"
        return None

    def _denied_by_name(self, server_id: str, tool: str) -> tuple[str, str] | None:
        for pattern in self.deny:
            if tool_matches(pattern, server_id, tool):
                return f"deny[{pattern!r}]", f"the policy denies {pattern!r}"
        if isinstance(self.allow, tuple) and not any(
                tool_matches(p, server_id, tool) for p in self.allow):
            return "allow", "no allow glob of the policy names this tool"
        return None

    def _budget_keys(self, server_id: str, tool: str) -> list[tuple[str, Budget]]:
        budgets: Mapping[str, Budget] = self._limits   # type: ignore[attr-defined]
        return [(key, budgets[key]) for key in (ALL_CALLS, server_id, f"{server_id}/{tool}")
                if key in budgets]


@dataclass(frozen=True)
class Decision:
    """What the policy says about one call.

    ``kind``: ``"send"`` (counted: ``charge`` is what to finish or release), ``"hold"``
    (counted too, but approval is needed first: ``rule`` names it), or a refusal:
    ``"denied"``, ``"budget"`` (``retry_after`` seconds or None, ``left``), ``"approval"``.
    """

    kind: str
    rule: str = ""
    reason: str = ""
    charge: Charge | None = None
    retry_after: float | None = None
    left: Mapping[str, float] | None = None

    @property
    def refused(self) -> bool:
        return self.kind in ("denied", "budget", "approval")


def decide(policy: Policy, ledger: BudgetLedger, caller: str, server_id: str, tool: str,
           args: Mapping[str, Any]) -> Decision:
    """Run deny, allow, the argument rules and the budgets; count the call when they agree.

    Returns a refusal, or ``send``/``hold`` with the call counted (release the charge if the
    call is then not sent; finish it with the call's wall time)."""
    named = policy._denied_by_name(server_id, tool)
    if named is not None:
        return Decision("denied", named[0], named[1])
    if callable(policy.allow) and not policy.allow(server_id, tool, args):
        return Decision("denied", "allow", "the policy's allow rule refused it")
    for index, rule in enumerate(policy.arguments):
        assert isinstance(rule, ArgumentRule)   # __post_init__ made every one
        if rule.applies(server_id, tool):
            why = rule.allows(args)
            if why is not None:
                return Decision("denied", f"arguments[{index}]", why)
    keys = policy._budget_keys(server_id, tool)
    cost = float(policy.cost(server_id, tool, args)) if policy.cost is not None and keys \
        else 0.0
    charge = None
    if keys:
        reserved = ledger.reserve(caller, keys, cost)
        if isinstance(reserved, Spent):
            return _budget_refusal(reserved)
        charge = reserved
    held = policy.needs_approval(server_id, tool)
    return Decision("send" if held is None else "hold", held or "", charge=charge)


def _budget_refusal(spent: Spent) -> Decision:
    budget = spent.budget
    limit = {"calls": budget.calls, "seconds": budget.seconds, "cost": budget.cost}[spent.what]
    unit = {"calls": "call" if limit == 1 else "calls", "seconds": "s of wall time",
            "cost": "of cost"}[spent.what]
    reset = (f"; it resets in {spent.retry_after:.1f} s" if spent.retry_after is not None
             else "; it does not reset by itself")
    window = f" per {budget.window:g} s" if budget.window is not None else ""
    return Decision("budget", f"budgets[{spent.key!r}]",
                    f"the budget of {limit:g} {unit}{window} for {spent.key!r} is spent{reset}",
                    retry_after=spent.retry_after, left=spent.left)


def finish_call(ledger: BudgetLedger, decision: Decision, seconds: float) -> None:
    """Count a sent call's wall time against the budgets it was counted on."""
    if decision.charge is not None:
        ledger.finish(decision.charge, seconds)


def _refusal(cls: type[PolicyRefused], server_id: str, tool: str, rule: str,
             why: str, **extra: Any) -> PolicyRefused:
    # Arguments are never quoted: they may hold secrets or personal data.
    return cls(f"calling tool {tool!r} on server {server_id!r}: {why} (rule: {rule})",
               tool=tool, rule=rule, local=True, server=server_id, method="tools/call",
               **extra)


def check_call(policy: Policy | None, ledger: BudgetLedger, server_id: str, tool: str,
               args: Mapping[str, Any], caller: str = "process") -> Decision | None:
    """The Manager's check: :func:`decide`, then the ``approve`` callback on this thread.

    Raises :class:`PolicyDenied`, :class:`BudgetExceeded` or :class:`ApprovalRejected`
    (``local=True``). On return the call is counted, and the caller sends it (then passes
    the decision and the call's wall time to :func:`finish_call`).
    """
    if policy is None:
        return None
    decision = decide(policy, ledger, caller, server_id, tool, args)
    if decision.kind == "denied":
        raise _refusal(PolicyDenied, server_id, tool, decision.rule, decision.reason)
    if decision.kind == "budget":
        raise _refusal(BudgetExceeded, server_id, tool, decision.rule, decision.reason,
                       retry_after=decision.retry_after)
    if decision.kind == "hold":
        approve = policy.approve
        try:
            approved = approve is not None and approve(server_id, tool, args)
        except BaseException:
            if decision.charge is not None:
                ledger.release(decision.charge)
            raise
        if not approved:
            if decision.charge is not None:
                ledger.release(decision.charge)
            why = "the approve callback rejected it" if approve is not None else \
                "it needs approval and the policy has no approve callback"
            raise _refusal(ApprovalRejected, server_id, tool,
                           "approve" if decision.rule == "approve" else decision.rule, why)
    return decision
