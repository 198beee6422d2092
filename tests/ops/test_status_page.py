"""The status page in a real browser (Debian's chromium under Playwright) against devhost."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.ops.browser import CHROMIUM, chromium, seeded_host
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


def test_the_page_signs_in_shows_what_is_held_run_and_in_progress_and_breaking_asks_why(
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
        run = page.locator('#runs tr[data-key="import-acme-2026-11-23"]')
        assert "completed" in run.inner_text()
        job = page.locator('#jobs tr[data-key="invoice-export-2026-11"]')
        assert "running" in job.inner_text() and "3" in job.inner_text()
        account = page.locator('#imports tr[data-key="acme"]')
        assert "1180" in account.inner_text() and "completed" in account.inner_text()
        # the last hour, from the stores, each figure with what it is read from
        sent = page.locator('#summary tr[data-key="emails sent"]')
        sent.wait_for()
        assert "1" in sent.inner_text() and "run-once records" in sent.inner_text()
        imported = page.locator('#summary tr[data-key="records imported"]').inner_text()
        assert "1592" in imported and "report.json" in imported  # acme's 1180 and beta's 412
        deferred = page.locator('#summary tr[data-key^="emails deferred"]').inner_text()
        assert "not stored" in deferred and "app.emails" in deferred
        # readable on a phone: nothing wider than the screen
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

        # it refreshes by itself: a lock released now shows as free without a reload
        host.leases[1].release()
        page.locator('#locks tr[data-key="email-evt-1042"] td.free').wait_for(timeout=10_000)

        prompts: list[str] = []
        answers = iter(["", "holder hung at 02:30"])

        def answer(dialog: object) -> None:
            prompts.append(f"{dialog.type}: {dialog.message}")  # type: ignore[attr-defined]
            dialog.accept(next(answers))  # type: ignore[attr-defined]

        page.on("dialog", answer)
        lock.get_by_role("button", name="Break").click()
        page.get_by_text("a reason is required").wait_for()
        assert ops_env.audit_entries() == []
        lock.get_by_role("button", name="Break").click()
        page.get_by_text("Broke import-acme").wait_for()
        assert all(p.startswith("prompt: Reason to break import-acme") for p in prompts)
        assert len(prompts) == 2
        [entry] = ops_env.audit_entries()
        assert (entry["key"], entry["reason"]) == ("import-acme", "holder hung at 02:30")
        assert entry["by"] == "operator key 'screens'"
        page.locator('#locks tr[data-key="import-acme"] td.free').wait_for(timeout=10_000)


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
        page.get_by_text("Reset import-acme-2026-11-23").wait_for()
        [entry] = ops_env.audit_entries()
        assert (entry["action"], entry["by"]) == ("reset", "ada@example.com (Entra object 9f2e)")
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
