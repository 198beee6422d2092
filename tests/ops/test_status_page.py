"""The status page in a real browser (Debian's chromium under Playwright) against devhost."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.ops.browser import CHROMIUM, chromium, seeded_host
from tests.ops.support import OpsEnv

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) and not os.environ.get("CI"),
    reason=f"{CHROMIUM} missing: run `make setup` (CI always runs this test)",
)


def _status(url: str, method: str = "GET", key: str | None = None, body: bytes = b"") -> int:
    headers = {"x-functions-key": key, "Content-Type": "application/json"} if key else {}
    request = urllib.request.Request(url, method=method, headers=headers, data=body or None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_page_shows_what_is_held_run_and_in_progress_and_breaking_asks_why(
    ops_env: OpsEnv, storage_env: str, tmp_path: Path
) -> None:
    settings = {"AzureWebJobsStorage": storage_env, **ops_env.settings()}
    with seeded_host(settings) as host, chromium(tmp_path / "profile") as browser:
        api = host.url.split("/status")[0]
        # auth levels as the host enforces them: reads take either key, a break only admin's
        assert _status(f"{api}/locks") == 401
        assert _status(f"{api}/locks", key=host.function_key) == 200
        assert _status(f"{api}/locks", key=host.admin_key) == 200
        brk = f"{api}/locks/import-acme/break"
        assert _status(brk, "POST", host.function_key, b'{"reason": "x"}') == 401
        assert _status(f"{api}/locks/..%2Fx/break", "POST", host.admin_key, b"{}") == 400

        page = browser.new_page()
        page.goto(host.url)
        lock = page.locator('#locks tr[data-key="import-acme"]')
        lock.wait_for()
        assert "held" in lock.inner_text() and "import_account" in lock.inner_text()
        run = page.locator('#runs tr[data-key="import-acme-2026-11-23"]')
        assert "completed" in run.inner_text()
        job = page.locator('#jobs tr[data-key="invoice-export-2026-11"]')
        assert "running" in job.inner_text() and "3" in job.inner_text()
        account = page.locator('#imports tr[data-key="acme"]')
        assert "1180" in account.inner_text() and "completed" in account.inner_text()
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
        page.locator('#locks tr[data-key="import-acme"] td.free').wait_for(timeout=10_000)
