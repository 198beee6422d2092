"""Write the status page's screenshots of docs/operations.md: `make screenshot`.

Starts a private Azurite, seeds it with the trial's scenario (tests.ops.browser.seed: locks
held, 69 run-once records with two in progress and one expired, a failing callback, a poisoned
message, a rejected row), runs devhost and photographs the page's first screen on a phone
(390x844) and on a desktop (1366x900). The tests never write here.

    python -m tests.ops.screenshot [PHONE.png [DESKTOP.png]]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from harness import services
from tests.ops.browser import DESKTOP, PHONE, ROOT, chromium, seeded_host

SCREENSHOT_QUEUES = {"NOTIFICATIONS_QUEUE": "notifications", "IMPORT_QUEUE": "imports",
                     "JOB_UNITS_QUEUE": "job-units"}  # fmt: skip


def main(argv: list[str]) -> int:
    targets = [Path(a) for a in argv] or [ROOT / "docs" / "status-page.png"]
    if len(targets) == 1:
        targets.append(targets[0].with_name(targets[0].stem + "-desktop.png"))
    with services.azurite() as azurite:
        settings = {"AzureWebJobsStorage": azurite.connection_string, **SCREENSHOT_QUEUES}
        os.environ.update(settings)
        with seeded_host(settings) as host:
            for target, viewport in zip(targets, (PHONE, DESKTOP), strict=True):
                with (
                    tempfile.TemporaryDirectory() as profile,
                    chromium(Path(profile), viewport) as browser,
                ):
                    page = browser.new_page()
                    page.set_extra_http_headers({"X-Operator-Key": host.operator_key})
                    page.goto(host.url)
                    page.wait_for_selector('#problems li[data-kind="callback"]')
                    page.wait_for_selector('#charts figure[data-series="failures"]')
                    target.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(target))
                print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
