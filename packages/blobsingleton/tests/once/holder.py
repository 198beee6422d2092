"""Child process: claim one `@once` key, say so on stdout, and finish when stdin says so.

`python holder.py KEY IN_PROGRESS_TIMEOUT`: prints "claimed" once its work runs, then waits
for a line on stdin (or to be killed) and returns {"by": "holder"}.
"""

from __future__ import annotations

import sys

from blobsingleton import once


def main() -> None:
    key, timeout = sys.argv[1], float(sys.argv[2])

    @once("hold-{key}", in_progress_timeout=timeout, scope="app")
    def work(key: str) -> dict[str, str]:
        print("claimed", flush=True)
        sys.stdin.readline()
        return {"by": "holder"}

    work(key)
    print("completed", flush=True)


if __name__ == "__main__":
    main()
