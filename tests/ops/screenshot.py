"""Write the status-page screenshot of docs/operations.md: `make screenshot` (docs/status-page.png).

Starts a private Azurite, seeds it (a lock held, a run completed, a job in progress),
runs devhost and photographs the page on a phone-sized screen. The tests never write here.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from harness import services
from tests.ops.browser import ROOT, chromium, seeded_host


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else ROOT / "docs" / "status-page.png"
    with services.azurite() as azurite, tempfile.TemporaryDirectory() as profile:
        os.environ["AzureWebJobsStorage"] = azurite.connection_string
        settings = {"AzureWebJobsStorage": azurite.connection_string}
        with seeded_host(settings) as host, chromium(Path(profile)) as browser:
            page = browser.new_page()
            page.set_extra_http_headers({"X-Operator-Key": host.operator_key})
            page.goto(host.url)
            page.wait_for_selector('#locks tr[data-key="import-acme"]')
            page.wait_for_selector('#imports tr[data-key="acme"]')
            target.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(target), full_page=True)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
