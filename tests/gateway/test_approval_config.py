"""The config's ``approval`` object: every accepted shape, and errors that name file and key."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from mcpsync.errors import ConfigError
from mcpsync.gateway._guard._approval import approver_from_config, desk_from_config
from mcpsync.gateway._guard._approvers import CommandApprover, TtyApprover, WebApprover

SOURCE = "/etc/gateway.json"


def test_no_approver_is_none() -> None:
    assert approver_from_config({}, SOURCE) is None
    assert approver_from_config({"hold_seconds": 10}, SOURCE) is None


def test_each_approver_kind() -> None:
    tty = approver_from_config({"approver": "tty"}, SOURCE)
    assert isinstance(tty, TtyApprover) and tty.label == "on /dev/tty"
    pty = approver_from_config({"approver": {"tty": {"path": "/dev/pts/9"}}}, SOURCE)
    assert isinstance(pty, TtyApprover) and pty.label == "on /dev/pts/9"
    web = approver_from_config({"approver": {"web": {"port": 0}}}, SOURCE)
    assert isinstance(web, WebApprover) and web.port == 0
    hook = approver_from_config({"approver": {"command": [sys.executable, "-c", "1"],
                                              "env": {"TEAM": "ops"}}}, SOURCE)
    assert isinstance(hook, CommandApprover)


def test_the_desk_takes_hold_seconds() -> None:
    desk = desk_from_config({"hold_seconds": 7.5}, SOURCE)
    assert desk.hold_seconds == 7.5
    desk.close()
    default = desk_from_config({}, SOURCE)
    assert default.hold_seconds == 25.0
    default.close()


@pytest.mark.parametrize(("section", "message"), [
    ({"aprover": "tty"}, "unknown key mcpsync.approval.aprover (known: approver, hold_seconds"),
    ({"approver": "phone"}, "mcpsync.approval.approver is 'phone'"),
    ({"approver": "web"}, "mcpsync.approval.approver 'web' is written as an object"),
    ({"approver": "command"}, "'command' needs the command"),
    ({"approver": {"web": {}, "tty": {}}}, "must name exactly one approver"),
    ({"approver": {"web": {"port": "80"}}}, "mcpsync.approval.approver.web.port must be a port"),
    ({"approver": {"web": {"port": 70000}}}, "mcpsync.approval.approver.web.port must be a port"),
    ({"approver": {"web": {"host": "0.0.0.0"}}}, "mcpsync.approval.approver.web.host must be a "
                                                 "loopback address"),
    ({"approver": {"web": {"prot": 1}}}, "unknown key mcpsync.approval.approver.web.prot"),
    ({"approver": {"web": True}}, "mcpsync.approval.approver.web must be an object"),
    ({"approver": {"tty": {"path": 3}}}, "mcpsync.approval.approver.tty.path must be a path"),
    ({"approver": {"command": "approve.sh"}}, "mcpsync.approval.approver.command must be a "
                                              "non-empty list of strings"),
    ({"approver": {"command": []}}, "must be a non-empty list"),
    ({"approver": {"command": ["/no/such/hook"]}}, "'/no/such/hook' is not found"),
    ({"approver": {"command": [sys.executable], "env": {"A": 1}}}, "mcpsync.approval.approver.env "
                                                                   "must be an object of "
                                                                   "strings"),
    ({"approver": {"command": [sys.executable], "shell": True}},
     "unknown key mcpsync.approval.approver.shell"),
    ({"hold_seconds": "25"}, "mcpsync.approval.hold_seconds must be a number"),
    ({"hold_seconds": 0}, "mcpsync.approval.hold_seconds must be a number"),
    ({"hold_seconds": True}, "mcpsync.approval.hold_seconds must be a number"),
    ({"max_held": 2}, "unknown key mcpsync.approval.max_held"),
    ([], "mcpsync.approval must be an object"),
])
def test_bad_sections_name_the_file_and_key(section: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        approver_from_config(section, SOURCE)
    assert str(info.value).startswith(f"{SOURCE}: ")
    assert message in str(info.value)


def test_the_key_path_can_be_given() -> None:
    with pytest.raises(ConfigError, match=r"unknown key gateway\.approval\.x"):
        approver_from_config({"x": 1}, SOURCE, key="gateway.approval")


def test_a_tty_approver_without_a_terminal_fails_at_start_naming_file_and_key() -> None:
    from mcpsync.gateway import ApprovalDesk

    approver = approver_from_config({"approver": {"tty": {"path": "/nonexistent/tty"}}},
                                    SOURCE)
    with pytest.raises(ConfigError) as info:
        ApprovalDesk(approver)
    assert str(info.value).startswith(f"{SOURCE}: mcpsync.approval.approver asks for the "
                                      f"terminal, but the tty approver cannot open "
                                      f"/nonexistent/tty")
