"""Requests per event with and without storage answering as Azure does under load, side by side.

Both passes run the notification flow of `harness scenario notifications` on one private
Azurite, every event to every instance, the instances' storage through the same seeded fault
proxies: off for the first pass, on for the second (by default 3 % of requests answered 503
ServerBusy without reaching storage, 3 % answered 500 OperationTimedOut or InternalError
after they landed, on every service). The retry budget is what it costs: the requests the
app and the host sent per event (each attempt counted at the clients' pipelines, every SDK
retry included), against the faultless pass of the same run. Issue 35's target: within 1.5x,
with no email sent twice or missing in either pass.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from harness import kit
from harness.fault_proxy import SERVER_ERROR_KINDS, parse_rates
from harness.scenarios import notifications

TARGETS = {"requests_per_event_vs_faultless": 1.5, "duplicates": 0, "missing": 0}
DEFAULT_RATES = "503=0.03,500=0.03"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rates", default=DEFAULT_RATES, help="server errors per request")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)


def _pass(report: notifications.NotificationsReport) -> dict[str, Any]:
    events = max(report.events, 1)
    return {
        "requests_per_event": round(
            (report.app_storage_requests + report.host_storage_requests) / events, 2
        ),
        "app_requests_per_event": report.app_requests_per_event,
        "app_blob_requests_per_event": report.app_blob_requests_per_event,
        "host_requests_per_event": report.host_requests_per_event,
        "duplicates": report.duplicates,
        "missing": report.missing,
        "invocations": report.invocations,
        "failed_invocations": report.failed_invocations,
        "deferrals": report.deferrals,
        "elapsed_s": report.elapsed_s,
        "drained": report.drained,
    }


def _injected(by_service: dict[str, dict[str, int]], events: int) -> dict[str, Any]:
    kinds = {k: sum(c.get(k, 0) for c in by_service.values()) for k in SERVER_ERROR_KINDS}
    requests = sum(c.get("requests", 0) for c in by_service.values())
    return {
        **kinds,
        "requests_drawn": requests,
        "share": round(sum(kinds.values()) / max(requests, 1), 4),
        "per_event": round(sum(kinds.values()) / max(events, 1), 2),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rates = parse_rates(args.rates)
    with kit.scenario_storage(True, ".", server_errors=rates, seed=args.seed):
        proxies = kit.active_fault_proxies()
        passes: dict[str, dict[str, Any]] = {}
        for name, enabled in (("faultless", False), ("server_errors", True)):
            for proxy in proxies.values():
                proxy.set_enabled(enabled)
            report = notifications.run(
                args.instances, args.events, timeout=args.timeout, log_level="WARNING"
            )
            passes[name] = _pass(report)
            if enabled:
                by_service = report.server_errors.get("by_service", {})
                passes[name]["injected"] = _injected(by_service, args.events)
    clean, faulted = passes["faultless"], passes["server_errors"]
    ratio = round(faulted["requests_per_event"] / max(clean["requests_per_event"], 1e-9), 3)
    checked = {
        "requests_per_event_vs_faultless": ratio <= TARGETS["requests_per_event_vs_faultless"],
        "no_duplicates": clean["duplicates"] == faulted["duplicates"] == 0,
        "none_missing": clean["missing"] == faulted["missing"] == 0,
        "drained": clean["drained"] and faulted["drained"],
    }
    return {
        "instances": args.instances,
        "events": args.events,
        "seed": args.seed,
        "rates": {k: v for k, v in asdict(rates).items() if k in SERVER_ERROR_KINDS},
        **passes,
        "requests_per_event_vs_faultless": ratio,
        "targets": TARGETS,
        "targets_checked": checked,
        "targets_met": all(checked.values()),
    }
