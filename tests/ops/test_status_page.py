"""The status page in a real browser (Debian's chromium under Playwright) against devhost."""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from functions.notifications import RECORD_SCOPE
from tests.ops.browser import (
    CHROMIUM,
    DESKTOP,
    EXPIRED,
    FAILING_JOB,
    IMPORT_SCOPE,
    IN_PROGRESS,
    PHONE,
    REJECT_REASON,
    chromium,
    seeded_host,
)
from tests.ops.support import OpsEnv, principal

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
    reason=f"{CHROMIUM} missing: run `make setup` (CI always runs this test)",
)


def _status(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, body: bytes = b""
) -> int:
    headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url, method=method, headers=headers, data=body or None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


#: Words split across lines in the page's text (keys, identifiers, may break): none wanted.
BROKEN_WORDS = """() => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest(".key, [hidden]")) continue;
    for (const match of node.textContent.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (tops.size > 1) broken.push(match[0]);
    }
  }
  return broken;
}"""


#: What `GET /api/timers` answers for a timer that missed its 02:00 occurrence.
LAST_NIGHT, TONIGHT = "2026-11-27T02:00:00+00:00", "2026-11-28T02:00:00+00:00"
TIMERS = {"items": [
    {"function": "nightly_import", "schedule": "0 0 2 * * *", "late": True,
     "last_run": {"occurrence": LAST_NIGHT, "outcome": "completed", "instance": "host-7",
                  "invocation_id": "a1", "finished": LAST_NIGHT},
     "next_due": TONIGHT, "missed": [TONIGHT], "skipped": []},
    {"function": "job_watcher", "schedule": "*/30 * * * * *", "late": False, "last_run": None,
     "next_due": "2099-01-01T00:00:00+00:00", "missed": [], "skipped": []},
]}  # fmt: skip


def _on_first_screen(locator: Any, viewport: dict[str, int]) -> bool:
    """Within the viewport, unscrolled (read off the element the page shows at that moment: it
    redraws the list at each refresh, so a box read as it is replaced is read again)."""
    for _ in range(3):
        locator.wait_for()
        box = locator.bounding_box()
        if box is not None:
            return bool(box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"])
    return False


def _first_screen_holds_what_needs_a_person(page: Any, viewport: dict[str, int]) -> None:
    problems = page.locator("#problems")
    page.locator('#problems li[data-kind="callback"]').wait_for()
    wanted = {
        "in progress": [problems.locator(f'li[data-kind="in_progress"][data-key="{key}"]')
                        for key in IN_PROGRESS],
        "expired": [problems.locator(f'li[data-kind="expired"][data-key="{EXPIRED}"]')],
        "held": [problems.locator(f'li[data-kind="lock"][data-key="{key}"]')
                 for key in ("import-acme", "email-evt-1042")],
        "callback": [problems.locator(f'li[data-kind="callback"][data-key="{FAILING_JOB}"]')],
        "poison": [problems.locator('li[data-kind="poison"]')],
        "rejected": [problems.locator('li[data-kind="rejected"][data-key="acme"]')],
    }  # fmt: skip
    for what, locators in wanted.items():
        for locator in locators:
            assert _on_first_screen(locator, viewport), f"{what} not on the first screen"
    for lock in wanted["held"]:
        assert re.search(r"held \d+ s", lock.inner_text()), lock.inner_text()
    assert "last status HTTP 500" in wanted["callback"][0].inner_text()
    assert "1 message" in wanted["poison"][0].inner_text()
    rejected = wanted["rejected"][0].inner_text()
    assert REJECT_REASON in rejected and "line 3" in rejected
    counts = page.locator("#counts").inner_text()
    assert "2 in progress" in counts and "1 expired" in counts and "2 locks held" in counts
    # the pictures, drawn by the page (SVG) from the API
    page.locator('#charts figure[data-series="failures"] svg polyline').wait_for()
    assert page.locator("#holds .hold").count() == 2
    # paged honestly: "1-50 of 69", and the next page holds the rest
    runs_note = page.locator("#runs-note")
    assert "1\u201350 of 69" in runs_note.inner_text()
    page.locator("#runs-pager").get_by_role("button", name="Next page").click()
    page.locator("#runs-note", has_text="51\u201369 of 69").wait_for()
    page.locator("#runs-pager").get_by_role("button", name="First page").click()
    page.evaluate("window.scrollTo(0, 0)")  # the clicks scrolled down to the pager
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_the_page_opens_on_what_needs_a_person_at_desktop_and_phone_widths(
    ops_env: OpsEnv, storage_env: str, tmp_path: Path
) -> None:
    settings = {"AzureWebJobsStorage": storage_env, **ops_env.settings()}
    settings.pop("OPS_OPERATOR_KEYS")  # the seeded host's own key
    with seeded_host(settings) as host:
        with chromium(tmp_path / "phone", PHONE) as browser:
            page = browser.new_page()
            page.set_extra_http_headers({"X-Operator-Key": host.operator_key})
            # an app with the timer ledger (GET /api/timers, as its page documents it)
            page.route("**/api/timers*", lambda route: route.fulfill(json=TIMERS))
            page.goto(host.url)
            _first_screen_holds_what_needs_a_person(page, PHONE)
            late = page.locator('#problems li[data-kind="late"][data-key="nightly_import"]')
            assert _on_first_screen(late, PHONE) and "1 missed" in late.inner_text()
            assert "1 timer late" in page.locator("#counts").inner_text()
            assert "late" in page.locator('#timers tr[data-key="nightly_import"]').inner_text()

        with chromium(tmp_path / "desktop", DESKTOP) as browser:
            page = browser.new_page()
            page.goto(host.url)
            page.get_by_text("Not signed in").wait_for()
            page.locator("#operator-key").fill(host.operator_key)
            page.get_by_role("button", name="Use this key").click()
            _first_screen_holds_what_needs_a_person(page, DESKTOP)
            page.locator('#locks tr[data-key="import-acme"]').wait_for()
            # this app's own ledger (GET /api/timers): its two timers (the nightly fan-out and
            # the job watcher's sweep, functions.ops.TIMERS) listed, nothing stale
            page.locator("#timers tr[data-key]").nth(1).wait_for()
            assert page.locator("#timers tr[data-key]").count() == 2
            assert page.locator("#stale").is_hidden()
            assert page.evaluate(BROKEN_WORDS) == []  # no word split at 1366 px

            # signing out clears the data; signing in shows it again
            page.get_by_role("button", name="Sign out").click()
            page.get_by_text("Not signed in").wait_for()
            assert page.locator("#problems li").count() == 0
            assert page.locator("#runs tbody tr").count() == 0
            page.locator("#operator-key").fill(host.operator_key)
            page.get_by_role("button", name="Use this key").click()
            page.locator('#problems li[data-kind="callback"]').wait_for()

            # a stopped host turns the page stale, naming the endpoint that failed; the
            # "updated" time stops
            page.locator("body:not(.is-stale)").wait_for()
            host.stop()
            # (a refresh under way as it stops may fail only its later requests: the next
            # one fails whole)
            stale = page.locator("#stale", has_text="/api/overview failed")
            stale.wait_for(timeout=20_000)
            assert "/api/locks failed" in stale.inner_text()
            updated = page.locator("#updated").inner_text()
            seen = int(page.evaluate("document.body.dataset.refreshes"))
            page.locator(f'body[data-refreshes="{seen + 2}"]').wait_for(timeout=20_000)
            assert page.locator("#updated").inner_text() == updated
            assert page.locator('#problems li[data-kind="callback"]').count() == 1  # kept, marked


def test_breaking_and_resetting_say_what_they_act_on_and_cause_before_asking_why(
    ops_env: OpsEnv, storage_env: str, tmp_path: Path
) -> None:
    settings = {"AzureWebJobsStorage": storage_env, **ops_env.settings()}
    settings.pop("OPS_OPERATOR_KEYS")  # the seeded host's own key
    with seeded_host(settings) as host, chromium(tmp_path / "profile") as browser:
        api = host.url.split("/status")[0]
        # as the host serves them: no key of the host opens the ops routes, a key in a URL
        # is refused, the operator key (a header) reads and breaks
        brk, body = f"{api}/locks/import-acme/break", b'{"reason": "x"}'
        assert _status(f"{api}/locks") == 401
        assert _status(f"{api}/locks", headers={"x-functions-key": host.function_key}) == 401
        assert _status(f"{api}/locks", headers={"x-functions-key": host.admin_key}) == 401
        assert _status(f"{brk}?code={host.admin_key}", "POST", body=body) == 400
        assert _status(f"{api}/status?code={host.admin_key}") == 400
        assert _status(brk, "POST", {"x-functions-key": host.admin_key}, body) == 401
        operator = {"X-Operator-Key": host.operator_key}
        assert _status(f"{api}/locks", headers=operator) == 200
        assert _status(f"{api}/locks/..%2Fx/break", "POST", operator, b"{}") == 400
        assert ops_env.audit_entries() == []

        page = browser.new_page()
        page.goto(host.url)
        page.get_by_text("Not signed in").wait_for()
        page.locator("#operator-key").fill(host.operator_key)
        page.get_by_role("button", name="Use this key").click()
        lock = page.locator('#locks tr[data-key="import-acme"]')
        lock.wait_for()
        assert host.operator_key not in page.url
        assert "held" in lock.inner_text() and "import_account" in lock.inner_text()
        job = page.locator('#jobs tr[data-key="invoice-export-2026-11"]')
        assert "running" in job.inner_text() and "3" in job.inner_text()
        failing = page.locator(f'#jobs tr[data-key="{FAILING_JOB}"]').inner_text()
        assert "callback failing" in failing and "HTTP 500" in failing
        account = page.locator('#imports tr[data-key="acme"]')
        assert "1180" in account.inner_text() and "completed" in account.inner_text()
        # the last hour, from the stores, each figure with what it is read from
        imported = page.locator('#summary tr[data-key="records imported"]')
        imported.wait_for()
        assert "1592" in imported.inner_text() and "report.json" in imported.inner_text()
        deferred = page.locator('#summary tr[data-key^="emails deferred"]').inner_text()
        assert "not stored" in deferred and "app.emails" in deferred

        # it refreshes by itself: a lock released now shows as free without a reload
        host.leases[1].release()
        page.locator('#locks tr[data-key="email-evt-1042"] td.state .free').wait_for(timeout=10_000)

        prompts: list[str] = []
        answers = iter([None, "", "holder hung at 02:30"])

        def answer(dialog: Any) -> None:
            prompts.append(dialog.message)
            reply = next(answers)
            if reply is None:
                dialog.dismiss()
            else:
                dialog.accept(reply)

        page.on("dialog", answer)
        # a sent email's reset says the email is sent again before asking why; dismissed
        sent = page.locator('#runs tr[data-key="email-evt-1041"]')
        sent.get_by_role("button", name="Reset").click()
        lock.get_by_role("button", name="Break").click()
        page.get_by_text("a reason is required").wait_for()
        assert ops_env.audit_entries() == []
        lock.get_by_role("button", name="Break").click()
        page.get_by_text("Broke import-acme (the app's own key)").wait_for()
        reset, *breaks = prompts
        assert reset.startswith(f"Reset email-evt-1041 (function {RECORD_SCOPE})")
        assert "the event's email is sent again" in reset
        assert reset.index("sent again") < reset.index("Reason to reset")
        assert len(breaks) == 2
        assert all(p.startswith("Break import-acme (the app's own key).") for p in breaks)
        assert all("Reason to break import-acme" in p for p in breaks)
        [entry] = ops_env.audit_entries()
        assert (entry["key"], entry["reason"]) == ("import-acme", "holder hung at 02:30")
        assert entry["by"] == "operator key 'screens'"
        page.locator('#locks tr[data-key="import-acme"] td.state .free').wait_for(timeout=10_000)


def test_behind_app_service_authentication_the_signed_in_operator_resets(
    ops_env: OpsEnv, storage_env: str, tmp_path: Path
) -> None:
    """The platform's principal header (injected here as App Service would, after sign-in)
    is the identity: the page needs no key and the audit names the verified user."""
    settings = {"AzureWebJobsStorage": storage_env, **ops_env.settings(),
                "OPS_EASY_AUTH": "true", "WEBSITE_AUTH_ENABLED": "True"}  # fmt: skip
    settings.pop("OPS_OPERATOR_KEYS")
    with seeded_host(settings) as host, chromium(tmp_path / "profile") as browser:
        api = host.url.split("/status")[0]
        reader = principal("bob@example.com", "Ops.Read")
        reset = f"{api}/runs/import-acme-2026-11-23/reset"
        assert _status(reset, "POST", reader, b'{"reason": "x"}') == 403
        forged = {"x-ms-client-principal-name": "ada@example.com"}
        assert _status(reset, "POST", forged, b'{"reason": "x"}') == 401

        page = browser.new_page()
        page.set_extra_http_headers(principal("ada@example.com", "Ops.Operate", object_id="9f2e"))
        page.on("dialog", lambda dialog: dialog.accept("re-run after the fix"))
        page.goto(host.url)
        run = page.locator('#runs tr[data-key="import-acme-2026-11-23"]')
        run.get_by_role("button", name="Reset").click()
        page.get_by_text(f"Reset import-acme-2026-11-23 (function {IMPORT_SCOPE})").wait_for()
        [entry] = ops_env.audit_entries()
        assert (entry["action"], entry["by"]) == ("reset", "ada@example.com (Entra object 9f2e)")
        assert entry["scope"] == IMPORT_SCOPE
        assert page.locator("#signin").is_hidden()


def test_the_page_allows_no_inline_script_and_no_framing(ops_env: OpsEnv, storage_env: str) -> None:
    settings = {"AzureWebJobsStorage": storage_env, **ops_env.settings()}
    with seeded_host(settings) as host:
        for url in (host.url, host.url.replace("status?", "status/status.js?"),
                    host.url.split("/status")[0] + "/locks"):  # fmt: skip
            try:
                response = urllib.request.urlopen(url, timeout=10)
            except urllib.error.HTTPError as error:
                response = error  # the API's 401 carries the headers too
            csp = response.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp, url
            assert response.headers["X-Content-Type-Options"] == "nosniff"
        page = urllib.request.urlopen(host.url, timeout=10).read().decode()
        assert "<script>" not in page and "<style>" not in page and " style=" not in page
