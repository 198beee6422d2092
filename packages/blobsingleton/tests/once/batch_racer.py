"""Child process: run `@once`'s `each` over the same batch of Event Hubs events as its rivals:
ready (a file `start.<pid>`), it waits for the start file, then logs each execution and prints
the batch's outcome counts as JSON."""

from __future__ import annotations

import json
import os
import sys
import time

import azure.functions as func
from blobsingleton import Busy, once
from eventhub_batch import orders


def main() -> None:
    out, count, start = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    @once("charge-{PartitionId}-{event.sequence_number}", busy=Busy.wait(timeout=60))
    def charge(event: func.EventHubEvent) -> dict[str, int | None]:
        with open(out, "a") as f:
            f.write(f"{event.sequence_number} {os.getpid()}\n")
        time.sleep(0.01)  # some work, so the rivals' runs overlap
        return {"charged": event.sequence_number}

    batch = orders(count)
    open(f"{start}.{os.getpid()}", "w").close()
    while not os.path.exists(start):  # the rivals start together, on the test's signal
        time.sleep(0.005)
    started = time.monotonic()
    result = charge.each(batch)
    elapsed = round(time.monotonic() - started, 2)
    wrong = [r.key for r in result if r.value != {"charged": r.item.sequence_number}]
    print(json.dumps({"counts": result.counts(), "wrong_values": wrong, "seconds": elapsed}))


if __name__ == "__main__":
    main()
