"""A child process that waits in a key's line (`FairLease`), for the fairness tests.

usage: python -m tests.lease.line_waiter KEY
Prints "asking", then, once it holds the key, "acquired TOKEN WAITED REQUESTS" (REQUESTS: the
storage requests it sent while asking, counted at its clients), releases and exits at once:
a lease it keeps for its own next turn is handed on by the exit.
"""

from __future__ import annotations

import sys
import time

from blobsingleton.leases import FairLease

from devhost import request_counting


def main() -> None:
    key = sys.argv[1]
    counter = request_counting.install()
    lease = FairLease(key)
    print("asking", flush=True)
    asked = time.monotonic()
    lease.acquire(timeout=10 * 15.0)  # ten lease periods: a slow machine is no failure
    waited = time.monotonic() - asked
    print(f"acquired {lease.token} {waited:.3f} {counter.total()}", flush=True)
    lease.release()


if __name__ == "__main__":
    main()
