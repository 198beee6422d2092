"""`python -m harness demo` as a newcomer sees it: a panel on a terminal, a summary when piped.

Both runs are small (2 instances x 15 events) so the test stays short; the numbers in the
summary come from the real runs (Azurite, the real function, the outbox).
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import child_env

pytestmark = pytest.mark.services  # the demo starts Azurite and devhost instances itself

ARGS = [sys.executable, "-m", "harness", "demo", "--instances", "2", "--events", "15"]


def _env() -> dict[str, str]:
    env = child_env(COLUMNS="120")
    env.pop("AzureWebJobsStorage", None)
    return env


def _check_summary(text: str) -> Path:
    lines = [line for line in text.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("Demo: 2 instances"))
    summary = lines[start:]
    assert len(summary) <= 20, summary
    guarded = re.search(r"with @once\s+(\d+)\s+(\d+)\s+(\d+)", text)
    unguarded = re.search(r"no guard\s+(\d+)\s+(\d+)\s+(\d+)", text)
    assert guarded and guarded.groups() == ("15", "0", "0"), text  # 15 emails, 0 dup, 0 missing
    assert unguarded and int(unguarded[1]) == 30 and int(unguarded[2]) == 15, text
    assert "OK: each event emailed exactly once" in text
    assert "python -m harness scenario notifications --app" in text  # what to run next
    log = re.search(r"Instances' log: (\S+)", text)
    assert log, text
    return Path(log[1])


@pytest.mark.timeout(240)
def test_piped_the_demo_prints_only_the_summary_and_logs_to_a_file(tmp_path: Path) -> None:
    done = subprocess.run(ARGS, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=230)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\x1b[" not in done.stdout  # no progress panel, no terminal control codes
    assert done.stdout.lstrip().startswith("Demo: 2 instances")
    log = _check_summary(done.stdout)
    assert log.exists() and "send_notification" in log.read_text()
    assert done.stderr.count("\n") < 5, done.stderr  # the instances' log is in the file


@pytest.mark.timeout(240)
def test_on_a_terminal_the_demo_shows_a_live_panel_then_the_summary(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(ARGS, cwd=tmp_path, env=_env(), stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)  # fmt: skip
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 230
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(10)
    os.close(leader)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text[-3000:]
    assert "deliveries handled" in text and "elapsed / left" in text  # the live panel
    assert "\x1b[" in text  # drawn in place with terminal control codes
    _check_summary(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", ""))
