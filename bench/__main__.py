"""`python -m bench NAME [--json]`: run one benchmark, print its result.

Each benchmark is a module `bench/NAME.py` with `configure(parser)` and `run(args) -> dict`.
Benchmarks start their own Azurite on free ports, so numbers never depend on leftovers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys

from devhost import request_counting

BENCHMARKS = {
    "requests": "storage requests per @singleton / @once invocation, against WebJobs' sequence",
    "storm": "N instances, every event to every instance: duplicates, latency, requests",
    "failover": "time until another instance holds: SIGKILL, SIGTERM, a killed @once sender",
    "contention": "one key, 1..16 processes: acquisitions/s, waits, handoff, requests",
    "scale": "1, 2, 4, 8 instances on the notification flow: events/s, Azurite CPU beside ours",
    "capacity": "requests/s an account sees per event rate, against Azure's published limits",
    "all": "every benchmark on one Azurite, reduced sizes: bench/results/results.json + plots",
    "fanin": "batch job completion tracking: requests per unit, completion latency",
    "imports": "import throughput: batched transactions vs one request per row; peak memory",
    "db_import": "a PostgreSQL table imported beside the CSV of its members, killed and resumed",
    "handoff": "lease handoff when an instance stops as the host stops it, and when it crashes",
    "fairness": "one key, N contending processes: plain polling against waiting in line",
    "skew": "instance clocks off by minutes: runs per key and takeover after a kill",
    "server_errors": "requests per event with and without 503/500 answers, side by side",
    "rejects": "what junk input costs the import (bytes written, CPU) under the reject caps",
    "batches": "run-once per item of a batch of 100: requests per item new, replayed, one by one",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="name", required=True)
    for name, help_text in BENCHMARKS.items():
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"bench.{name}":
                raise
            continue
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--json", action="store_true", help="print one JSON object only")
        module.configure(sub)
        sub.set_defaults(module=module)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    request_counting.install()
    result = args.module.run(args)
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))
    return 0 if result.get("targets_met", True) else 1


if __name__ == "__main__":
    sys.exit(main())
