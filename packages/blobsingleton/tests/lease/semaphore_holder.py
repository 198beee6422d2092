"""A child process that holds a slot of a `limit=N` key, for the racing tests.

usage: semaphore_holder.py KEY LIMIT COUNTER ROUNDS
  Each round: acquire a slot (blocking, fair), add one to the holders counted in COUNTER (a file
  updated under an exclusive `flock`), record the most seen at once, give the processor away a
  few times, subtract one, release. Prints "done MAX_SEEN TOKENS" at the end.
usage: semaphore_holder.py KEY LIMIT - hold
  Acquire one slot, print "acquired SLOT TOKEN", hold until killed.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

from blobsingleton.leases import LeaseSemaphore, install_signal_handlers


def _count(path: str, delta: int) -> int:
    """Add `delta` to the holders in `path` ("now most" on one line); return the count now."""
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        now, most = (int(x) for x in (f.read().split() or ["0", "0"]))
        now += delta
        most = max(most, now)
        f.seek(0)
        f.truncate()
        f.write(f"{now} {most}")
        f.flush()
        os.fsync(f.fileno())
        return now


def main() -> None:
    key, limit, counter, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    install_signal_handlers()
    if rounds == "hold":
        lease = LeaseSemaphore(key, limit, poll_interval=0.2).acquire()
        print(f"acquired {lease.slot} {lease.token}", flush=True)
        while True:
            time.sleep(1)
    tokens = []
    for _ in range(int(rounds)):
        with LeaseSemaphore(key, limit, fair=True, poll_interval=0.1) as lease:
            lease.ensure_held()
            _count(counter, +1)
            for _ in range(20):  # hold a moment: let the others' attempts interleave
                time.sleep(0.005)
            lease.ensure_held()
            _count(counter, -1)
            tokens.append(f"{lease.slot}:{lease.token}")
    print("done", " ".join(tokens), flush=True)


if __name__ == "__main__":
    main()
