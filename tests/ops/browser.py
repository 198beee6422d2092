"""A seeded app on devhost and Debian's chromium under Playwright: for the page test and for
the status page's screenshot in docs/operations.md (`make screenshot`). Never `playwright
install`: the browser is the one the project's set-up installs with apt-get."""

from __future__ import annotations

import contextlib
import secrets
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blobsingleton import BlobLease
from blobsingleton.records import Status

from devhost.supervisor import HostOptions, Supervisor
from functions.notifications import QUEUE as NOTIFICATIONS_QUEUE
from functions.notifications import RECORD_SCOPE
from harness.services import free_port
from shared.operators import key_digest
from tests.ops.support import (
    fail_callback,
    failing_receiver,
    hold_lock,
    poison_message,
    put_record,
    start_job,
    write_import_report,
)

#: Where the imports' run-once records are (`functions.imports.import_under_lease`'s own).
IMPORT_SCOPE = "functions.imports.import_under_lease"

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
OPS_FUNCTIONS = ["ops_locks", "ops_runs", "ops_jobs", "ops_imports", "ops_summary_last_hour",
                 "ops_overview", "ops_timers", "ops_break_lock", "ops_reset_run", "ops_status_page",
                 "ops_status_asset"]  # fmt: skip
DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}


@dataclass
class SeededHost:
    url: str  # the status page (no key in it: the page asks who you are)
    function_key: str
    admin_key: str
    operator_key: str  # its SHA-256 is in OPS_OPERATOR_KEYS, as "screens"
    leases: list[BlobLease]
    stop: Callable[[], object]  # stops the host (its pages' next refresh fails)


#: The trial's scenario (issue 51): 69 run-once records, two in progress (one of them a
#: function's own) and one expired among them.
FILLER_RECORDS = 63
IN_PROGRESS = ("nightly-import-2026-11-28T02:00:00", "import-acme-2026-11-28")
EXPIRED = "email-evt-1039"
FAILING_JOB = "payroll-export-2026-11"
REJECT_REASON = "date_of_birth: is not a date"
POISON_REASON = "not a notification: event_id: field required"


def seed(callback_url: str) -> list[BlobLease]:
    """Two locks held (one free), 69 run-once records (an email sent among the completed; two
    in progress, one expired), a job in progress and one whose callback answers HTTP 500, a
    poisoned notification, the accounts' last imports (one with a rejected row), and an hour
    of event tallies for the charts."""
    import time

    from shared import ops_tally

    leases = [hold_lock("import-acme", function="import_account", invocation="7f3c-02a1")]
    leases.append(hold_lock("email-evt-1042", function="notify", invocation="b41e-9d07"))
    BlobLease("import-beta").acquire(timeout=10).release()
    for i in range(FILLER_RECORDS):
        put_record(f"email-evt-{900 + i}", Status.COMPLETED, scope=RECORD_SCOPE)
    put_record("nightly-import-2026-11-23T02:00:00", Status.COMPLETED, result={"accounts": 2})
    put_record("import-acme-2026-11-23", Status.COMPLETED, result={"imported": 1180},
               scope=IMPORT_SCOPE)  # fmt: skip
    put_record("email-evt-1041", Status.COMPLETED, scope=RECORD_SCOPE)  # an email sent
    put_record(IN_PROGRESS[0], Status.IN_PROGRESS, expires_in=840)
    put_record(IN_PROGRESS[1], Status.IN_PROGRESS, expires_in=600, scope=IMPORT_SCOPE)
    put_record(EXPIRED, Status.IN_PROGRESS, expires_in=-120, scope=RECORD_SCOPE)
    start_job("invoice-export-2026-11", units=3)
    fail_callback(FAILING_JOB, callback_url)
    poison_message(NOTIFICATIONS_QUEUE, POISON_REASON)
    write_import_report("acme", "2026-11-23", imported=1180, rejected=1,
                        reasons=((3, REJECT_REASON),))  # fmt: skip
    write_import_report("beta", "2026-11-23", imported=412, rejected=0)
    tally = ops_tally.install()
    now = time.time()
    for minutes, kind, count in ((55, "completed", 4), (40, "completed", 9), (30, "busy_skip", 2),
                                 (20, "completed", 12), (12, "defer", 5), (10, "lost", 1),
                                 (5, "completed", 7), (2, "acquire", 6)):  # fmt: skip
        for _ in range(count):
            tally.count(kind, now - minutes * 60)
    tally.write()
    return leases


@contextlib.contextmanager
def seeded_host(settings: dict[str, str]) -> Iterator[SeededHost]:
    """devhost serving only the ops functions (queued job units stay queued: in progress),
    with an operator key configured; `settings` may add App Service authentication's."""
    function_key, admin_key = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    operator_key = secrets.token_urlsafe(32)
    port = free_port()
    receiver = contextlib.ExitStack()
    leases = seed(receiver.enter_context(failing_receiver()))
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
        yield SeededHost(url, function_key, admin_key, operator_key, leases, host.stop)
    finally:
        host.stop()
        receiver.close()
        for lease in leases:
            lease.release()


@contextlib.contextmanager
def chromium(profile_dir: Path, viewport: dict[str, int] | None = None) -> Iterator[Any]:
    """Debian's chromium, headless, background networking off, a new empty profile; a phone's
    screen unless `viewport` (e.g. DESKTOP) says otherwise."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile_dir), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport=viewport or PHONE, device_scale_factor=2 if viewport in (None, PHONE) else 1,
            is_mobile=viewport in (None, PHONE), has_touch=viewport in (None, PHONE),
        )  # fmt: skip
        try:
            yield context
        finally:
            context.close()
