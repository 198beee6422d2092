"""A child process whose wall clock is off by OFFSET seconds, running one guarded call.

usage: skewed_child.py OFFSET KIND KEY WORK_SECONDS IN_PROGRESS_TIMEOUT
  KIND: once-alo | once-amo | singleton, with "-wait" to wait for a busy key instead of
        skipping it (the guard around the work and its busy policy)
  OFFSET: added to time.time() / time.time_ns() before anything else runs (the monotonic
          clocks are left alone), as on a machine whose clock is off.
Prints, one line each, flushed: "clock T" (its time.time()), "start" (about to call), "ran"
(the work started), "done" (the work finished), "result VALUE" (what the call returned: None
when skipped).
The work takes WORK_SECONDS, during which the heartbeat or lease renewal keeps its claim.
"""

from __future__ import annotations

import sys
import time

OFFSET = float(sys.argv[1])
_real_time, _real_time_ns = time.time, time.time_ns
time.time = lambda: _real_time() + OFFSET  # type: ignore[assignment]
time.time_ns = lambda: _real_time_ns() + int(OFFSET * 1e9)  # type: ignore[assignment]

from blobsingleton import Busy, Mode, once, singleton  # noqa: E402

try:
    from blobsingleton.leases import install_signal_handlers
except ImportError:  # library 0.2 (`python -m bench skew --library` measures it too)
    from blobsingleton import install_signal_handlers  # type: ignore[attr-defined,no-redef]


def main() -> None:
    kind, key, work_seconds = sys.argv[2], sys.argv[3], float(sys.argv[4])
    in_progress_timeout = float(sys.argv[5])
    install_signal_handlers()
    print(f"clock {time.time()}", flush=True)
    busy = Busy.WAIT if kind.endswith("-wait") else Busy.SKIP

    def work() -> str:
        print("ran", flush=True)
        time.sleep(work_seconds)
        print("done", flush=True)
        return "sent"

    if kind.startswith("singleton"):
        guarded = singleton(key, on_busy=busy, period=15, wait_timeout=60)(work)
    else:
        guarded = once(
            key,
            mode=Mode.AT_MOST_ONCE if kind.startswith("once-amo") else Mode.AT_LEAST_ONCE,
            in_progress_timeout=in_progress_timeout,
            on_in_progress=busy,
            wait_timeout=60,
        )(work)
    print("start", flush=True)
    print(f"result {guarded()}", flush=True)


if __name__ == "__main__":
    main()
