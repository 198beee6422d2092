"""A seeded app on devhost and Debian's chromium under Playwright: for the page test and for
the status page's screenshot in docs/operations.md (`make screenshot`). Never `playwright
install`: the browser is the one the project's set-up installs with apt-get."""

from __future__ import annotations

import contextlib
import secrets
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blobsingleton import BlobLease
from blobsingleton.records import Status

from devhost.supervisor import HostOptions, Supervisor
from functions.notifications import RECORD_SCOPE
from harness.services import free_port
from shared.operators import key_digest
from tests.ops.support import hold_lock, put_record, start_job, write_import_report

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
OPS_FUNCTIONS = ["ops_locks", "ops_runs", "ops_jobs", "ops_imports", "ops_summary_last_hour", "ops_overview",
                 "ops_break_lock", "ops_reset_run", "ops_status_page",
                 "ops_status_asset"]  # fmt: skip
PHONE = {"width": 390, "height": 844}


@dataclass
class SeededHost:
    url: str  # the status page (no key in it: the page asks who you are)
    function_key: str
    admin_key: str
    operator_key: str  # its SHA-256 is in OPS_OPERATOR_KEYS, as "screens"
    leases: list[BlobLease]


def seed() -> list[BlobLease]:
    """A lock held, runs completed (an email among them), a job in progress and the accounts'
    last imports."""
    leases = [hold_lock("import-acme", function="import_account", invocation="7f3c-02a1")]
    leases.append(hold_lock("email-evt-1042", function="notify", invocation="b41e-9d07"))
    BlobLease("import-beta").acquire(timeout=10).release()
    put_record("nightly-import-2026-11-23T02:00:00", Status.COMPLETED, result={"accounts": 2})
    put_record("import-acme-2026-11-23", Status.COMPLETED, result={"imported": 1180})
    put_record("email-evt-1041", Status.COMPLETED, scope=RECORD_SCOPE)  # an email sent
    start_job("invoice-export-2026-11", units=3)
    write_import_report("acme", "2026-11-23", imported=1180, rejected=3)
    write_import_report("beta", "2026-11-23", imported=412, rejected=0)
    return leases


@contextlib.contextmanager
def seeded_host(settings: dict[str, str]) -> Iterator[SeededHost]:
    """devhost serving only the ops functions (queued job units stay queued: in progress),
    with an operator key configured; `settings` may add App Service authentication's."""
    function_key, admin_key = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    operator_key = secrets.token_urlsafe(32)
    port = free_port()
    leases = seed()
    host = Supervisor(
        HostOptions(
            app_dir=str(ROOT), http_port=port, functions=OPS_FUNCTIONS, drain_timeout=5,
            settings={"OPS_OPERATOR_KEYS": f"screens={key_digest(operator_key)}", **settings,
                      "DEVHOST_FUNCTION_KEY": function_key, "DEVHOST_ADMIN_KEY": admin_key},
        )
    )  # fmt: skip
    host.start()
    try:
        url = f"http://127.0.0.1:{port}/api/status?refresh=2"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
        yield SeededHost(url, function_key, admin_key, operator_key, leases)
    finally:
        host.stop()
        for lease in leases:
            lease.release()


@contextlib.contextmanager
def chromium(profile_dir: Path) -> Iterator[Any]:
    """Debian's chromium, headless, background networking off, a new empty profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile_dir), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True,
        )  # fmt: skip
        try:
            yield context
        finally:
            context.close()
