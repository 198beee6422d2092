"""The `services` marker that `make test-fast` deselects: set from the fixtures a test uses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT, child_env

pytestmark = pytest.mark.services  # collects in a child pytest


def collected(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}


def test_tests_using_azurite_processes_or_an_explicit_mark_are_services() -> None:
    files = ["tests/lease/test_fairness.py", "packages/blobsingleton/tests/lease/test_errors.py",
             "tests/harness/test_demo_output.py"]  # fmt: skip
    services = collected("-m", "services", *files)
    others = collected("-m", "not services", *files)
    assert not services & others
    # storage_env (Azurite) and subprocess_env (processes), by fixture:
    assert "test_a_release_hands_the_lease_to_the_waiter_in_line" in services
    assert "test_contending_processes_take_turns_in_line" in services
    # the demo starts Azurite and instances itself: marked in its file
    assert "test_piped_the_demo_prints_only_the_summary_and_logs_to_a_file" in services
    # plain unit tests stay in `make test-fast`
    assert "test_errors_subclass_the_builtin_they_behave_like" in others
    assert not any(name.startswith("test_a_release") for name in others)
