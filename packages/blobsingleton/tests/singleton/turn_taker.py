"""A child process calling one `@singleton` function (default busy: waits in line) in a loop,
for the fairness test: each call holds the key `HOLD` seconds and appends "token start end
pid" to OUT; at the end, "requests pid N".

usage: turn_taker.py KEY OUT SECONDS HOLD
"""

from __future__ import annotations

import os
import sys
import time

from blobsingleton import current_lease, singleton
from blobsingleton.config import set_client_options
from blobsingleton.testing import RequestCounter


def main() -> None:
    key, out, seconds, hold = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    counter = RequestCounter()
    set_client_options(raw_request_hook=counter)

    @singleton("{name}", scope="app")
    def turn(name: str) -> str:
        start = time.time()
        time.sleep(hold)
        return f"{current_lease().token} {start:.6f} {time.time():.6f} {os.getpid()}\n"

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = turn(key)
        with open(out, "a") as rows:
            rows.write(row)
    with open(out, "a") as rows:
        rows.write(f"requests {os.getpid()} {counter.total()}\n")


if __name__ == "__main__":
    main()
