"""Real processes racing on a real Azurite: fencing, crash takeover, one run per account."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest
from blobsingleton.config import scope_of
from blobsingleton.records import BlobRecordStore

from functions import imports
from harness import import_samples as samples
from shared.imports.request import ImportRequest
from tests.imports.support import ImportsEnv

CHILD = str(Path(__file__).with_name("import_child.py"))
NIGHT = "2026-11-22"


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, *args], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def wait_for(stream: IO[str] | None, text: str, timeout: float = 60.0) -> list[str]:
    """Lines read until one contains `text` (inclusive)."""
    assert stream is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} not seen; output was:\n{''.join(seen)}")


def body(account: str) -> str:
    return ImportRequest(account=account, run_date=NIGHT, run_id=NIGHT).to_json()


@pytest.mark.slow
def test_a_paused_stale_holder_writes_nothing_after_a_takeover(
    imports_env: ImportsEnv, subprocess_env: dict[str, str]
) -> None:
    rows = list(samples.members(6000))
    imports_env.upload("fence", "big.csv", samples.csv_bytes(rows))
    stale = spawn(subprocess_env, "hold", "fence")
    token = int(wait_for(stale.stdout, "acquired")[-1].split()[1])
    wait_for(stale.stdout, " records, ")  # its progress line: members are landing
    stale.send_signal(signal.SIGSTOP)  # paused mid-import, past its 15 s lease
    try:
        newer = spawn(subprocess_env, "hold", "fence")
        newer_token = int(wait_for(newer.stdout, "acquired", timeout=40)[-1].split()[1])
        assert newer_token > token
        wait_for(newer.stdout, "done", timeout=120)
        assert newer.wait(30) == 0
        before = imports_env.members("fence")
    finally:
        stale.send_signal(signal.SIGCONT)
    output = "".join(wait_for(stale.stdout, "stale holder", timeout=60))
    assert stale.wait(30) == 3
    assert f"stale holder: token {token} < {newer_token}, stopping" in output
    after = imports_env.members("fence")
    assert after == before, "the stale holder changed the table after the takeover"
    assert len(after) == 6000
    assert {r["FencingToken"] for r in after.values()} == {newer_token}
    assert imports_env.state("fence")["Token"] == newer_token
    report = imports_env.read_json(f"fence/reports/{NIGHT}/report.json")
    assert report["token"] == newer_token  # the stale holder wrote no report either
    stale_attempt = imports_env.read_json(f"fence/reports/{NIGHT}/attempts/{token:012d}.json")
    assert stale_attempt["outcome"] is None


@pytest.mark.slow
def test_a_killed_run_is_taken_over_by_the_next_delivery_and_nothing_is_lost(
    imports_env: ImportsEnv, subprocess_env: dict[str, str]
) -> None:
    rows = list(samples.members(4000, bad_every=40))
    imports_env.upload("crash", "big.csv", samples.csv_bytes(rows))
    crashed = spawn(subprocess_env, "function", "crash", body("crash"))
    wait_for(crashed.stdout, " records, ")  # its progress line, not another log line
    crashed.kill()  # no cleanup at all: lease, run-once record and staged rejects left behind
    crashed.wait()
    killed_at = time.monotonic()
    retry = spawn(subprocess_env, "function", "crash", body("crash"))
    while retry.wait(120) == 0 and not imports_env.blob_names(f"crash/reports/{NIGHT}/report"):
        retry = spawn(subprocess_env, "function", "crash", body("crash"))  # deferred: again
        time.sleep(1)
    # Taken over once the crashed run's lease (15 s) is free; ten lease periods tell "blocked
    # until it expired" from "blocked for good" on any machine (how soon: `bench failover`).
    assert time.monotonic() - killed_at < 10 * 15, "the crashed run blocked the account"
    assert len(imports_env.members("crash")) == 4000 - 100
    rejected = imports_env.rejected_lines(f"crash/rejected/{NIGHT}/big.csv.rejected.jsonl")
    assert len(rejected) == 100
    assert imports_env.blob_names("crash/incoming/") == []
    record = BlobRecordStore(scope=scope_of(imports.import_under_lease)).get(
        f"import-crash-{NIGHT}"
    )
    assert record is not None and record.status == "completed" and record.attempt == 2


def test_racing_deliveries_import_each_account_exactly_once(
    imports_env: ImportsEnv, subprocess_env: dict[str, str]
) -> None:
    """Six processes deliver the same two accounts' messages at once."""
    accounts = ("east", "west")
    for account in accounts:
        imports_env.upload(account, "a.csv", samples.csv_bytes(list(samples.members(500))))
    procs = [spawn(subprocess_env, "function", a, body(a)) for a in accounts for _ in range(3)]
    for proc in procs:
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, out
    # deferred copies may be waiting; those would find the run completed (stored result)
    for account in accounts:
        attempts = imports_env.blob_names(f"{account}/reports/{NIGHT}/attempts/")
        assert len(attempts) == 1, f"{account} ran {len(attempts)} times"
        assert len(imports_env.members(account)) == 500
        report = imports_env.read_json(f"{account}/reports/{NIGHT}/report.json")
        assert report["totals"]["imported"] == 500


@pytest.mark.long
def test_memory_stays_flat_as_files_grow(
    imports_env: ImportsEnv, subprocess_env: dict[str, str]
) -> None:
    """Anything kept per row (the file, a set of ids) would cost 60-100 bytes a row.

    Both files span several full 256 KiB download ranges, so the SDK's per-range buffers
    (the largest transient) are the same size in both runs.
    """
    peaks = {}
    for rows in (12000, 36000):
        account = f"mem{rows}"
        imports_env.upload(account, "a.csv", samples.csv_bytes(samples.members(rows)))
        proc = spawn(subprocess_env, "memory", account)
        out = proc.communicate(timeout=300)[0]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["records"] == rows
        peaks[rows] = result["peak_bytes"]
    growth = peaks[36000] - peaks[12000]
    assert growth < 24000 * 16, f"peak grew {growth} bytes for 24,000 more rows: {peaks}"
