"""The web-page approver over real HTTP (``requests`` against its own loopback server).

Approve and reject from the page's forms, then what must be refused: no token (403), a bad
CSRF token (403), a foreign Host header (403, DNS rebinding), a cross-site Origin (403), a
replayed approval (409, nothing changes), a digest that is not the held one (409), and no
CORS headers anywhere. The secrets appear in no repr.
"""

from __future__ import annotations

import html
import queue
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from mcpsync.gateway._guard._approval import ApprovalDesk, HeldCall, Verdict
from mcpsync.gateway._guard._approvers import WebApprover

RULE = "approval[files__*]"


@dataclass
class Page:
    desk: ApprovalDesk
    approver: WebApprover
    announced: list[str]

    @property
    def url(self) -> str:
        return self.approver.url

    def hold(self, call: HeldCall) -> queue.Queue[Verdict]:
        out: queue.Queue[Verdict] = queue.Queue()
        self.desk.submit(call, RULE, on_progress=None, on_done=out.put)
        deadline = time.monotonic() + 10
        while call.ticket not in requests.get(self.url, timeout=5).text:
            assert time.monotonic() < deadline, "the held call never showed on the page"
            time.sleep(0.02)
        return out

    def form(self, call: HeldCall) -> dict[str, str]:
        """The hidden fields of the call's form, read from the page as a browser would."""
        text = requests.get(self.url, timeout=5).text
        section = text[text.index(html.escape(call.ticket)) - 200:]
        fields = dict(re.findall(r'name="(ticket|digest|csrf)" value="([^"]*)"', section)[:3])
        assert set(fields) == {"ticket", "digest", "csrf"}, section
        return fields

    def post(self, fields: dict[str, str], **headers: str) -> requests.Response:
        return requests.post(self.url + "decide", data=fields, headers=headers, timeout=5,
                             allow_redirects=False)


@pytest.fixture
def page() -> Iterator[Page]:
    announced: list[str] = []
    approver = WebApprover(announce=announced.append)
    desk = ApprovalDesk(approver, hold_seconds=20)
    yield Page(desk, approver, announced)
    desk.close()


def test_the_url_is_announced_once_and_kept_out_of_reprs(page: Page) -> None:
    assert len(page.announced) == 1 and page.url in page.announced[0]
    token = page.url.rstrip("/").rsplit("/", 1)[1]
    assert len(token) >= 40
    assert token not in repr(page.approver) and token not in repr(page.desk)
    assert page.url.startswith("http://127.0.0.1:")


def test_approve_from_the_page(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/x", "api_key": "hunter2"})
    out = page.hold(call)
    listing = requests.get(page.url, timeout=5)
    assert listing.status_code == 200 and call.digest in listing.text
    assert "hunter2" not in listing.text and "[redacted]" in listing.text
    assert listing.headers["Cache-Control"] == "no-store"
    assert listing.headers["Referrer-Policy"] == "no-referrer"
    answer = page.post({**page.form(call), "decision": "approve"})
    assert answer.status_code == 200 and "Approved" in answer.text
    verdict = out.get(timeout=5)
    assert verdict.approved and verdict.reason == "approved by the web approver"
    assert call.ticket not in requests.get(page.url, timeout=5).text


def test_reject_from_the_page(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/y"})
    out = page.hold(call)
    answer = page.post({**page.form(call), "decision": "reject"})
    assert answer.status_code == 200 and "Rejected" in answer.text
    verdict = out.get(timeout=5)
    assert not verdict.approved and verdict.reason == "rejected by the web approver"


def test_a_request_without_the_token_is_403(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/z"})
    out = page.hold(call)
    root = page.url.rsplit("/", 2)[0]
    fields = {**page.form(call), "decision": "approve"}
    for url in (root + "/", root + "/decide", root + "/not-the-token/",
                root + "/not-the-token/decide"):
        got = requests.get(url, timeout=5)
        assert got.status_code == 403 and call.digest not in got.text
        posted = requests.post(url, data=fields, timeout=5)
        assert posted.status_code == 403
    assert out.empty() and len(page.desk.held()) == 1


def test_a_bad_csrf_token_is_403_and_decides_nothing(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/z"})
    out = page.hold(call)
    fields = page.form(call)
    for csrf in ("", "0" * 64, fields["csrf"][:-1] + ("0" if fields["csrf"][-1] != "0"
                                                     else "1")):
        answer = page.post({**fields, "csrf": csrf, "decision": "approve"})
        assert answer.status_code == 403 and "CSRF" in answer.text
    no_csrf = {k: v for k, v in fields.items() if k != "csrf"}
    assert page.post({**no_csrf, "decision": "approve"}).status_code == 403
    assert out.empty() and len(page.desk.held()) == 1


def test_a_replayed_approval_has_no_effect_and_says_so(page: Page) -> None:
    first = HeldCall.of("files", "delete", {"path": "same"})
    out = page.hold(first)
    fields = {**page.form(first), "decision": "approve"}
    assert page.post(fields).status_code == 200
    assert out.get(timeout=5).approved
    second = HeldCall.of("files", "delete", {"path": "same"})   # same digest, new ticket
    out2 = page.hold(second)
    replay = page.post(fields)
    assert replay.status_code == 409
    assert "already decided (approved)" in replay.text and "nothing changed" in replay.text
    assert out2.empty() and [c.ticket for c in page.desk.held()] == [second.ticket]
    assert page.post({**page.form(second), "decision": "reject"}).status_code == 200
    assert not out2.get(timeout=5).approved


def test_a_digest_that_is_not_held_is_refused(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/a"})
    out = page.hold(call)
    other = HeldCall.of("files", "delete", {"path": "/"}).digest
    answer = page.post({**page.form(call), "digest": other, "decision": "approve"})
    assert answer.status_code == 409 and "not the held call's" in answer.text
    assert out.empty() and len(page.desk.held()) == 1


def test_a_timed_out_call_cannot_be_approved_afterwards() -> None:
    approver = WebApprover(announce=lambda line: None)
    with ApprovalDesk(approver, hold_seconds=0.8) as desk:
        page = Page(desk, approver, [])
        call = HeldCall.of("files", "delete", {"path": "late"})
        out = page.hold(call)
        fields = {**page.form(call), "decision": "approve"}
        verdict = out.get(timeout=5)
        assert not verdict.approved and verdict.reason == "no decision within 0.8 s"
        late = page.post(fields)
        assert late.status_code == 409 and "no decision in time" in late.text


def test_a_foreign_host_header_is_403(page: Page) -> None:
    for host in ("evil.example", f"evil.example:{page.approver.port}", "127.0.0.1:1"):
        got = requests.get(page.url, headers={"Host": host}, timeout=5)
        assert got.status_code == 403 and "loopback" in got.text
    assert requests.get(page.url, headers={"Host": f"localhost:{page.approver.port}"},
                        timeout=5).status_code == 200


def test_a_cross_site_post_is_403_and_no_cors_headers_are_sent(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/b"})
    out = page.hold(call)
    fields = {**page.form(call), "decision": "approve"}
    assert page.post(fields, Origin="http://evil.example").status_code == 403
    assert page.post(fields, **{"Sec-Fetch-Site": "cross-site"}).status_code == 403
    preflight = requests.options(page.url + "decide", timeout=5,
                                 headers={"Origin": "http://evil.example",
                                          "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 405
    for response in (preflight, requests.get(page.url, timeout=5,
                                             headers={"Origin": "http://evil.example"})):
        assert not [h for h in response.headers if h.lower().startswith("access-control")]
    assert out.empty()
    same = page.post(fields, Origin=page.url.rsplit("/", 2)[0],
                     **{"Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200 and out.get(timeout=5).approved


def test_the_page_listens_on_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        WebApprover(host="0.0.0.0")


def test_scripts_read_the_same_list_as_json(page: Page) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/j", "secret": "s3"})
    out = page.hold(call)
    listing = requests.get(page.url + "held.json", timeout=5)
    assert listing.status_code == 200
    (held,) = listing.json()["held"]
    assert (held["ticket"], held["digest"]) == (call.ticket, call.digest)
    assert held["arguments"] == {"path": "/tmp/j", "secret": "[redacted]"}
    root = page.url.rsplit("/", 2)[0]
    assert requests.get(root + "/held.json", timeout=5).status_code == 403
    fields = {k: held[k] for k in ("ticket", "digest", "csrf")}
    assert page.post({**fields, "decision": "approve"}).status_code == 200
    assert out.get(timeout=5).approved
