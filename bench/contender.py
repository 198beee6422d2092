"""Child process: ask for one key again and again, as a busy `Busy.WAIT` function would.

usage: python -m bench.contender KEY OUT SECONDS HOLD FAIR(0|1)
Each acquisition appends "token start end waited pid" to OUT (one line, one write); at the
end one line "requests pid N" with the storage requests this process sent.
"""

from __future__ import annotations

import os
import sys
import time

from blobsingleton import BlobLease
from blobsingleton.leases import FairLease

from devhost import request_counting


def main() -> None:
    key, out = sys.argv[1], sys.argv[2]
    seconds, hold, fair = float(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1"
    counter = request_counting.install()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lease = (FairLease if fair else BlobLease)(key, poll_interval=1.0)
        asked = time.monotonic()
        lease.acquire(timeout=max(1.0, deadline - time.monotonic() + 30))
        start = time.time()
        waited = time.monotonic() - asked
        time.sleep(hold)
        end = time.time()
        line = f"{lease.token} {start:.6f} {end:.6f} {waited:.3f} {os.getpid()}\n"
        lease.release()
        fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line.encode())
        os.close(fd)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"requests {os.getpid()} {counter.total()}\n".encode())
    os.close(fd)


if __name__ == "__main__":
    main()
