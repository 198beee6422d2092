"""The order `make test` hands test files to its processes: the longest files first.

pytest-xdist (`--dist loadfile`) gives each process a whole file at a time, in the order the
files are collected; left to itself it sorts them by their number of tests, which puts a
file of one 100 s test last, where it runs alone while the other processes have finished.
Handed out longest first, the files end together (longest-processing-time-first).

`tests/durations.json` holds each file's seconds from a measured run (`make test` with
`--durations=0`); `tests/conftest.py` sorts the collected files by it (`longest_files_first`),
a file not listed after every listed one, in collection order. It only orders: a stale figure
makes the run a little longer, never a test pass or fail. Refresh it after a run of the whole
suite:

    make test PYTEST_ARGS="--durations=0 -q" > /tmp/durations.txt
    .venv/bin/python -m tests.durations /tmp/durations.txt
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

FILE = Path(__file__).with_name("durations.json")
#: A file under this many seconds is left out: it runs in the tail, in collection order.
LISTED_FROM = 1.0
_LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+([^:\s]+)::")


def load() -> dict[str, float]:
    """Seconds by file (its path from the repository's root, "/"-separated); {} if none."""
    if not FILE.exists():
        return {}
    return {str(name): float(seconds) for name, seconds in json.loads(FILE.read_text()).items()}


def longest_files_first(items: list[pytest.Item]) -> None:
    """Sort `items` file by file, the longest files first. A file's tests stay together and
    in their order; files not listed keep theirs, after the listed ones."""
    seconds = load()
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(item.nodeid.split("::", 1)[0], len(first_seen))

    def order(item: pytest.Item) -> tuple[float, int]:
        name = item.nodeid.split("::", 1)[0]
        return -seconds.get(name, 0.0), first_seen[name]

    items.sort(key=order)


def per_file(report: Iterable[str]) -> dict[str, float]:
    """The seconds of each file in the lines of a `pytest --durations=0` report, longest
    first, files under LISTED_FROM left out."""
    seconds: Counter[str] = Counter()
    for line in report:
        match = _LINE.match(line)
        if match:
            seconds[match[2]] += float(match[1])
    return {name: round(total) for name, total in seconds.most_common() if total >= LISTED_FROM}


def main(argv: list[str]) -> None:
    """`python -m tests.durations REPORT`: write tests/durations.json from REPORT."""
    (report,) = argv
    found = per_file(Path(report).read_text().splitlines())
    if not found:
        raise SystemExit(f"{report}: no `--durations=0` lines (pytest ... --durations=0)")
    FILE.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{FILE}: {len(found)} files, {sum(found.values()):.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
