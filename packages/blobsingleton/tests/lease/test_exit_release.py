"""The library releases what a process holds on a normal interpreter exit, by itself, and on
SIGTERM even when it lands while the main thread holds the locks a release takes.

The first test installs no signal handlers: the atexit hook is registered when the process
first holds a lease (importing registers nothing: test_import_registers_nothing.py), so a
worker whose stream closes, or `func start` stopped with Ctrl-C, lets a waiter take over at
once. The host's own stop path kills the worker, and nothing runs then.
"""

from __future__ import annotations

import select
import signal
import subprocess
import sys

import pytest
from blobsingleton import BlobLease
from blobsingleton.leases import read_lock

HOLD_AND_EXIT = """
import sys
from blobsingleton import BlobLease
lease = BlobLease(sys.argv[1]).acquire()
print("acquired", flush=True)
sys.stdin.readline()  # exit (normally) when the test says so, still holding the lease
"""


def test_a_normal_exit_releases_held_leases_without_signal_handlers(
    subprocess_env: dict[str, str],
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_EXIT, "exit-key"],
        env=subprocess_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "acquired"
    assert read_lock("exit-key").leased
    proc.stdin.close()  # the script returns: a normal interpreter exit
    assert proc.wait(20) == 0
    assert not read_lock("exit-key").leased
    BlobLease("exit-key").acquire(blocking=False).release()  # free at once, no expiry wait


SIGNALLED_WHILE_LOCKED = """
import os, signal, sys, time
from blobsingleton import BlobLease
from blobsingleton.leases import install_signal_handlers
from blobsingleton import _shutdown
install_signal_handlers()
lease = BlobLease(sys.argv[1]).acquire()
# SIGTERM lands while this thread holds the locks a release needs: a handler that took them
# itself would wait for this very thread, for ever.
with _shutdown._lock, lease._state_lock:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100):  # bytecodes run, so the Python-level handler has run by now
        pass
    print("still running with the locks held", flush=True)
while True:
    time.sleep(0.1)
"""


def test_a_sigterm_that_lands_while_the_locks_are_held_still_releases_and_exits(
    subprocess_env: dict[str, str],
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED_WHILE_LOCKED, "signal-key"],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    if not ready:
        proc.kill()
        pytest.fail("deadlocked: the signal handler waited for a lock the main thread held")
    assert proc.stdout.readline().strip() == "still running with the locks held"
    assert proc.wait(20) == -signal.SIGTERM  # the signal went on to the default handler
    assert not read_lock("signal-key").leased
    BlobLease("signal-key").acquire(blocking=False).release()
