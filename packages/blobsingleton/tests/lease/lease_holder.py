"""A child process that takes a lease and reports what it did, for the racing tests.

usage: lease_holder.py KEY MODE OUT [HOLD_SECONDS]
  race:     acquire (blocking), append "token start end" to OUT, hold, release
  hold:     acquire, print "acquired TOKEN", then hold until killed (SIGTERM releases)
  pause:    acquire, print "acquired", sleep HOLD, then ensure_held(): print "held" or "lost"
"""

from __future__ import annotations

import sys
import time

from blobsingleton import BlobLease, LeaseLost
from blobsingleton.leases import install_signal_handlers


def main() -> None:
    key, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
    hold = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    install_signal_handlers()
    lease = BlobLease(key, poll_interval=0.2)
    if mode == "race":
        with lease:
            start = time.time()
            time.sleep(hold)
            end = time.time()
            with open(out, "a") as f:
                f.write(f"{lease.token} {start} {end}\n")
        return
    lease.acquire()
    print(f"acquired {lease.token}", flush=True)
    if mode == "hold":
        while True:
            time.sleep(1)
    time.sleep(hold)
    try:
        lease.ensure_held()
        print("held", flush=True)
    except LeaseLost as error:
        print(f"lost: {error.reason}", flush=True)


if __name__ == "__main__":
    main()
