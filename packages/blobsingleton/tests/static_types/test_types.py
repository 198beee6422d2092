"""The decorators' types are honest: mypy --strict sees the parameters kept, the function's
own result type where the policy never gives None (WAIT, a callable's answer, at least once),
and the possible `None` where it may (SKIP, DEFER's re-enqueued copy, an at-most-once key
whose run crashed), for sync and async functions alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

HERE = Path(__file__).parent
#: Each test runs mypy --strict from cold, about 15 s: not part of `make test-fast`.
pytestmark = pytest.mark.services


def mypy(path: Path) -> tuple[str, int]:
    """mypy --strict on one file, in this process (mypy's own API): its report and status."""
    stdout, stderr, status = api.run(["--strict", "--no-incremental", str(path)])
    return stdout + stderr, status


def test_a_users_app_type_checks_with_the_decorators_result_types() -> None:
    report, status = mypy(HERE / "user_app.py")
    assert status == 0, report


def test_a_users_mistakes_are_caught_by_mypy() -> None:
    source = (HERE / "user_mistakes.py").read_text().splitlines()
    expected = {n for n, line in enumerate(source, 1) if "# MISTAKE" in line}
    report, _ = mypy(HERE / "user_mistakes.py")
    flagged = {int(m) for m in re.findall(r"user_mistakes\.py:(\d+): error", report)}
    assert flagged == expected, report
    # Using a SKIP, DEFER or at-most-once result as if present is the None error itself.
    assert report.count('Item "None" of "Receipt | None" has no attribute "order_id"') == 3
