"""The library releases what a process holds on a normal interpreter exit, by itself.

No `install_signal_handlers()` here: the atexit hook is registered when blobsingleton is
imported, so a worker whose stream closes, or `func start` stopped with Ctrl-C, lets a waiter
take over at once. The host's own stop path kills the worker, and nothing runs then.
"""

from __future__ import annotations

import subprocess
import sys

from blobsingleton import BlobLease, read_lock

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
