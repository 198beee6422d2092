"""The walks in docs/internals.md cannot drift from the code: the first call of
`@once("{order_id}")` on a sync function in a fresh process, and of its `fn.each`, traced with
`sys.settrace` to the first storage request (`walk_child.py`, against a Blob endpoint of its
own), must run the library files the page names, no more library lines than it states (and
not far fewer: the page is updated when the walk shrinks), and send the requests it states."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
INTERNALS = HERE.parents[1] / "docs" / "internals.md"
#: How a walk's figures are stated on the page (one per walk, in its section).
STATED = re.compile(
    r"\*\*Traced\*\* \(`tests/structure/test_walk.py`, (?P<walk>[^)]+)\): (?P<files>\d+) library "
    r"files \((?P<names>[^)]*)\), (?P<lines>\d+) library lines, (?P<requests>\d+) requests"
)
#: A line count below this share of the page's means the page is out of date.
SLACK = 0.9
#: Settings of the suite's own process left out of the child's environment.
UNSET = ("AzureWebJobs", "AzureFunctions", "BLOBSINGLETON", "RUNONCE", "LOCK_", "OTEL", "WEBSITE")


def _stated() -> dict[str, dict[str, Any]]:
    text = " ".join(INTERNALS.read_text().split())  # a statement may wrap
    found = {}
    for match in STATED.finditer(text):
        names = sorted(f"{name.strip(' `')}.py" for name in match["names"].split(","))
        found[match["walk"]] = {
            "files": int(match["files"]), "names": names, "lines": int(match["lines"]),
            "requests": int(match["requests"]),
        }  # fmt: skip
    return found


def _traced(walk: str) -> dict[str, Any]:
    # A fresh process with none of this one's storage, namespace, host or telemetry settings:
    # the walk of the defaults, whatever the suite around it set.
    env = {k: v for k, v in os.environ.items() if not k.startswith(UNSET)}
    child = subprocess.run(
        [sys.executable, str(HERE / "walk_child.py"), walk],
        capture_output=True, text=True, timeout=120, check=True, env=env,
    )  # fmt: skip
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("walk", ["once", "each"])
def test_the_walk_runs_what_internals_states(walk: str) -> None:
    stated = _stated()[{"once": "@once", "each": "fn.each"}[walk]]
    traced = _traced(walk)
    assert stated["files"] == len(stated["names"]), stated
    assert traced["files"] == stated["names"], (traced["files"], traced["per_file"])
    assert SLACK * stated["lines"] <= traced["lines"] <= stated["lines"], traced["per_file"]
    assert len(traced["requests"]) == stated["requests"], traced["requests"]


def test_the_first_once_call_claims_first_and_completes_with_no_look_and_no_thread() -> None:
    traced = _traced("once")
    assert [r.split()[0] for r in traced["requests"]] == ["PUT", "PUT"]  # create, complete
    assert "once-watch" not in traced["threads"]
    assert traced["outcome"] == "shipped A-1"
