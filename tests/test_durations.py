"""`make test` hands the longest test files out first (tests/durations.py): the figures are
read from a `--durations=0` report, every listed file exists, the conftest sorts by them
with each file's tests together and in order, and the Makefile keeps pytest-xdist from
re-sorting them by their number of tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests import durations
from tests.support import ROOT

REPORT = """\
============================= slowest durations ==============================
102.67s call     packages/blobsingleton/tests/once/test_race.py::test_eight
58.56s call     tests/imports/test_resume_devhost.py::test_killed[csv]
38.06s call     tests/imports/test_resume_devhost.py::test_killed[834]
0.50s setup    tests/imports/test_resume_devhost.py::test_killed[csv]
0.60s call     tests/test_docs.py::test_links
0.30s teardown tests/test_docs.py::test_links
0.01s call     tests/test_docs.py::test_other
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
2175 passed, 5 skipped in 684.74s (0:11:24)
"""


def test_a_report_is_summed_per_file_longest_first_short_files_left_out() -> None:
    found = durations.per_file(REPORT.splitlines())
    assert found == {
        "packages/blobsingleton/tests/once/test_race.py": 103,
        "tests/imports/test_resume_devhost.py": 97,
    }
    assert list(found) == sorted(found, key=lambda name: -found[name])
    # tests/test_docs.py: 0.91 s in all, under LISTED_FROM: it keeps its place in the tail
    assert durations.LISTED_FROM > 0.91


def test_every_listed_file_exists() -> None:
    listed = durations.load()
    assert len(listed) > 50  # the measured run of the whole suite, not an empty file
    missing = [name for name in listed if not (ROOT / name).is_file()]
    assert not missing, f"renamed or removed: refresh tests/durations.json ({missing})"


@dataclass
class Item:
    nodeid: str


def test_the_longest_files_come_first_each_files_tests_together_in_order() -> None:
    listed = durations.load()
    longest, second = list(listed)[:2]
    items = [
        Item("tests/a_new_file.py::test_one"),
        Item(f"{second}::test_x"),
        Item("tests/a_new_file.py::test_two"),
        Item(f"{longest}::test_b"),
        Item("tests/another_new_file.py::test_one"),
        Item(f"{longest}::test_a"),
    ]
    durations.longest_files_first(cast(Any, items))
    assert [item.nodeid for item in items] == [
        f"{longest}::test_b",
        f"{longest}::test_a",
        f"{second}::test_x",
        # files not listed: after the listed ones, in the order they were collected
        "tests/a_new_file.py::test_one",
        "tests/a_new_file.py::test_two",
        "tests/another_new_file.py::test_one",
    ]


def test_this_session_collected_the_longest_files_first(request: pytest.FixtureRequest) -> None:
    listed = durations.load()
    files = list(dict.fromkeys(item.nodeid.split("::", 1)[0] for item in request.session.items))
    seconds = [listed.get(name, 0.0) for name in files]
    assert seconds == sorted(seconds, reverse=True), files


def test_make_test_keeps_this_order_for_pytest_xdist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (command,) = re.findall(r"^test:.*\n\t(.*)$", makefile, flags=re.MULTILINE)
    assert "--dist loadfile --no-loadscope-reorder" in command, command
