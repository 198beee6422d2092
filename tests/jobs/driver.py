"""A child process working a job's unit queue with the production code; it can crash itself.

usage: driver.py [STEP[:N]]      (env DRIVER_BATCH: messages per receive, default 16;
                                  DRIVER_VISIBILITY: seconds, default 3)
  Receives unit messages (visible again DRIVER_VISIBILITY s after a crash), runs each through
  shared.jobs.process_unit with the JOB_UNIT_HANDLER of the environment, deletes it, and
  exits once the queue is empty, invisible messages included. Prints "step NAME TIME" after each
  durable step (worked, marked, counted, completion-recorded, announced, ...). With STEP:N it
  SIGKILLs itself right after the N-th (default first) occurrence of STEP, the way a crashed
  instance stops: no cleanup, no message deleted.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter

from azure.core.exceptions import HttpResponseError

from shared import storage
from shared.jobs import JobSettings, JobStore, UnitMessage, load_handler, process_unit

VISIBILITY = int(os.environ.get("DRIVER_VISIBILITY", "3"))
BATCH = int(os.environ.get("DRIVER_BATCH", "16"))


def main() -> None:
    crash_step, _, nth = (sys.argv[1] if len(sys.argv) > 1 else "").partition(":")
    crash_after = int(nth or 1)
    seen: Counter[str] = Counter()

    def on_step(name: str) -> None:
        seen[name] += 1
        print(f"step {name} {time.time():.6f}", flush=True)
        if name == crash_step and seen[name] == crash_after:
            os.kill(os.getpid(), signal.SIGKILL)

    settings = JobSettings.from_env()
    store = JobStore(settings)
    handler = load_handler(settings.handler)
    queue = storage.queue_client(settings.queue)
    while True:
        batch = list(
            queue.receive_messages(
                messages_per_page=BATCH, max_messages=BATCH, visibility_timeout=VISIBILITY
            )
        )
        if not batch:
            if not queue.get_queue_properties().approximate_message_count:
                return
            time.sleep(0.2)
            continue
        for message in batch:
            unit = UnitMessage.parse(message.content)
            process_unit(unit, handler, store, attempt=message.dequeue_count, on_step=on_step)
            try:
                queue.delete_message(message)
            except HttpResponseError as error:  # redelivered meanwhile: at least once
                if error.error_code not in ("MessageNotFound", "PopReceiptMismatch"):
                    raise


if __name__ == "__main__":
    main()
