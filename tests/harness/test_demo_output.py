"""`python -m harness demo` as a newcomer sees it: a panel on a terminal, a summary when piped.

Both runs are small (2 instances x 15 events) so the test stays short; the numbers in the
summary come from the real runs (Azurite, the real function, the outbox).
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
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
    # the nightly imports part: two accounts of files, one from a SQLite table, each run once
    assert re.search(r"db-00 +from a SQLite table +1 run, +196 imported", text), text
    assert "OK: each account imported exactly once, the SQLite one beside the files" in text
    assert "python -m harness scenario notifications --app" in text  # what to run next
    assert not re.search(r"(?<![/\w])python -m harness", text), "a bare `python`: not the venv's"
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
    run_the_suggested_commands(done.stdout, tmp_path)


def suggested(text: str) -> list[list[str]]:
    """The commands of the summary's "Look next" lines (after the first ": " of each)."""
    look = text.split("Look next:", 1)[1]
    lines = [line.split(": ", 1)[1] for line in look.splitlines() if line.startswith("  - ")]
    found = [part.split("; to browse it: ")[-1] for part in lines]
    return [shlex.split(command) for command in found if not command.endswith(".md")]


def run_the_suggested_commands(text: str, cwd: Path) -> None:
    """Each command runs as printed, from where the demo ran, with no virtualenv activated
    (PATH without .venv/bin): the scenarios with a small run appended, Azurite on free ports
    until it listens."""
    commands = suggested(text)
    assert len(commands) == 3, commands
    env = {**_env(), "PATH": "/usr/bin:/bin"}
    env.pop("VIRTUAL_ENV", None)
    for command in commands:
        if "harness" in command:
            small = [*command, "--instances", "1", "--events", "3", "--json"]
            done = subprocess.run(small, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=180)  # fmt: skip
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
            continue
        assert command[0].endswith("azurite"), command
        ports = ["--blobPort", "0", "--queuePort", "0", "--tablePort", "0"]
        server = subprocess.Popen([*command, *ports], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            assert server.stdout is not None
            seen = [server.stdout.readline() for _ in range(2)]
            assert "successfully listening" in seen[-1], seen
        finally:
            server.terminate()
            server.wait(30)


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
