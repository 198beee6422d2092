"""Capacity on paper: what one storage account sees, from request counts measured here.

Azure's published scalability targets (learn.microsoft.com/azure/storage/common/
scalability-targets-standard-account, .../blobs/scalability-targets, .../tables/
scalability-targets): about 20,000 requests/s per standard account, up to 500 requests/s
per blob, up to 2,000 entities/s per table partition (1 KiB entities). Each row turns a
measured count into the event rate at which a limit is reached, and what to do then.
"""

from __future__ import annotations

import argparse
from typing import Any

ACCOUNT_REQUESTS_PER_S = 20_000
BLOB_REQUESTS_PER_S = 500
PARTITION_ENTITIES_PER_S = 2_000
IMPORT_ROWS_PER_TRANSACTION = 99  # members per entity-group transaction (+ the state row)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8, help="deliveries of each event")
    parser.add_argument("--iterations", type=int, default=20, help="for the request counts")


def _row(what: str, requests_per_event: float, limit: str, max_rate: float, then: str) -> dict:
    return {
        "what": what,
        "requests_per_unit": round(requests_per_event, 2),
        "limit": limit,
        "max_units_per_s": round(max_rate, 1),
        "then": then,
    }


def compute(
    per_operation: dict[str, Any], instances: int, storm: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The capacity table from `bench requests` counts (and, if given, a storm's)."""
    first, dup = per_operation["once_first_run"], per_operation["once_duplicate"]
    alts = per_operation.get("alternatives", {})
    spread = "spread lock/record containers over more accounts (shard the key hash)"
    rows = [
        _row("@once, one delivery per event", first, "account 20,000 req/s",
             ACCOUNT_REQUESTS_PER_S / first, spread),
        _row(f"@once, every event to {instances} instances (sequential duplicates)",
             first + (instances - 1) * dup, "account 20,000 req/s",
             ACCOUNT_REQUESTS_PER_S / (first + (instances - 1) * dup), spread),
        _row("@singleton on one key (acquisitions)", per_operation["singleton_invocation"],
             "one blob 500 req/s", BLOB_REQUESTS_PER_S / per_operation["singleton_invocation"],
             "more keys (finer scope ids); one hot key caps at this rate"),
        _row("import rows into one partition (batched)", 1 / IMPORT_ROWS_PER_TRANSACTION,
             "partition 2,000 entities/s", PARTITION_ENTITIES_PER_S * IMPORT_ROWS_PER_TRANSACTION
             / (IMPORT_ROWS_PER_TRANSACTION + 1),
             "one partition per account and night already; split big accounts' partition keys"),
    ]  # fmt: skip
    if "webjobs" in alts:
        webjobs = per_operation.get("webjobs_function_singleton", 5)
        limit = BLOB_REQUESTS_PER_S / webjobs
        rows.append(_row("WebJobs [Singleton] on one key (invocations)", webjobs,
                         "one blob 500 req/s", limit, "more scope ids"))  # fmt: skip
    if storm is not None and "ours" in storm.get("alternatives", {}):
        ours = storm["alternatives"]["ours"]
        per_event = ours["blob_requests_per_event"] + ours["queue_requests_per_event"]
        rows.append(_row(f"@once storm, measured ({storm['instances']} instances, blob + queue)",
                         per_event, "account 20,000 req/s", ACCOUNT_REQUESTS_PER_S / per_event,
                         spread + "; queues in another account"))  # fmt: skip
    return {
        "limits": {
            "account_requests_per_s": ACCOUNT_REQUESTS_PER_S,
            "blob_requests_per_s": BLOB_REQUESTS_PER_S,
            "partition_entities_per_s": PARTITION_ENTITIES_PER_S,
        },
        "rows": rows,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench import requests

    counts = requests.run(argparse.Namespace(iterations=args.iterations, hold_seconds=0.5))
    return {"measured": counts, **compute(counts, args.instances)}
