"""Child process: run `@once` over the same keys as its rivals; log each execution."""

from __future__ import annotations

import sys

from blobsingleton import Busy, once


def main() -> None:
    out, count = sys.argv[1], int(sys.argv[2])

    @once("race-{key}", busy=Busy.SKIP)
    def work(key: str) -> None:
        with open(out, "a") as f:
            f.write(f"{key}\n")

    for i in range(count):
        work(f"k{i:04d}")


if __name__ == "__main__":
    main()
