"""The decorators' types are honest: mypy sees the parameters and the possible `None`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
#: Each test runs mypy in a child process, about 15 s from cold: not part of `make test-fast`.
pytestmark = pytest.mark.services


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_users_app_type_checks_with_the_decorators_result_types() -> None:
    result = mypy(HERE / "user_app.py")
    assert result.returncode == 0, result.stdout


def test_a_users_mistakes_are_caught_by_mypy() -> None:
    source = (HERE / "user_mistakes.py").read_text().splitlines()
    expected = {n for n, line in enumerate(source, 1) if "# MISTAKE" in line}
    result = mypy(HERE / "user_mistakes.py")
    flagged = {int(m) for m in re.findall(r"user_mistakes\.py:(\d+): error", result.stdout)}
    assert flagged == expected, result.stdout
