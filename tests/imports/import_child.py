"""A child process that imports one account, for the tests with real processes.

usage: import_child.py MODE ACCOUNT [ARG]
  function  deliver ARG (a queue message body) to the queue function `import_account`
  hold      take the account's lease, print "acquired TOKEN", import with progress lines
            every 0.2 s; exit 0 when done, 3 when stopped as a stale holder
  memory    import under the lease and print {"peak_bytes": ..., "records": ...} (tracemalloc)
Logs go to stdout, one line each, flushed, so the parent can wait for them.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import tracemalloc
import uuid
from datetime import date

import azure.functions as func


def _fill_regex_cache() -> None:
    """Fill `re`'s 512-entry cache with patterns like the ones the Tables SDK compiles per
    batch response (email.feedparser, one per multipart boundary), so the measured peak is
    the import's own and not that bounded cache filling up during the first ~25k rows."""
    for i in range(600):
        separator = f"--batchresponse_{uuid.UUID(int=i)}"
        re.compile("(?P<sep>" + re.escape(separator) + r")(?P<end>--)?(?P<ws>[ \t]*)"
                   r"(?P<linesep>\r\n|\r|\n)?$")  # fmt: skip


def main() -> int:
    mode, account = sys.argv[1], sys.argv[2]
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("azure").setLevel(logging.WARNING)
    from blobsingleton import BlobLease
    from blobsingleton.leases import install_signal_handlers

    from shared.imports.importer import run_import
    from shared.imports.member_table import StaleHolder
    from shared.imports.request import ImportRequest

    install_signal_handlers()
    if mode == "function":
        from functions.imports import import_account

        msg = func.QueueMessage(id="child", body=sys.argv[3].encode())
        import_account(msg)
        return 0
    request = ImportRequest.nightly(account, date(2026, 11, 22))
    with BlobLease(f"import-{account}", poll_interval=0.5) as lease:
        print(f"acquired {lease.token}", flush=True)
        if mode == "memory":
            tracemalloc.start()  # first: the cache entries evicted later must be traced too
            _fill_regex_cache()
            tracemalloc.reset_peak()
            report = run_import(request, lease.token, email=False)
            peak = tracemalloc.get_traced_memory()[1]
            print(json.dumps({"peak_bytes": peak, "records": report.records}), flush=True)
            return 0
        try:
            report = run_import(request, lease.token, progress_every=0.2, email=False)
        except StaleHolder:
            return 3
        print(f"done {report.imported}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
