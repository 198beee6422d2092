"""`python -m harness chaos`: the three flows at once on a private Azurite, under faults.

A run puts together the workload (`chaos_workload.py`: notifications, nightly imports and batch
jobs, fed over the fault window), the seeded schedule (`faults.py`) carried out by the
injectors (`injectors.py`: kill instances, pause an import lease holder past its lease, restart
Azurite with its data; seeded proxies reset, stall and slow connections, and with
`--server-errors` answer requests as Azure does under load: 503 ServerBusy, 500
OperationTimedOut / InternalError after the request landed) and, once the queues
have drained, the invariants (`invariants.py`), checked from the stores and the recording
stand-ins (outbox, callback receiver), never from the app's counters or logs. Faults stop at
75 % of the run.

The instances get every setting explicitly (`HostOptions.settings`, their storage through
the proxies); this process reaches the same Azurite directly. The readers the checks share
with the app and the library (job store, outbox, `blobsingleton.ops`) take their connection
and container names from settings, so this process is configured once, before anything
starts (`_configure_this_process`, as `kit.scenario_storage` does for every scenario), and
never swapped back and forth.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from blobsingleton import StorageAccount

from devhost.app_settings import AppSettings
from devhost.supervisor import Supervisor
from devhost.worker import apply_settings
from harness import invariants, kit
from harness.callbacks import CallbackReceiver
from harness.chaos_workload import HOSTILE, UNITS_PER_JOB, Workload
from harness.fault_proxy import FAULT_KINDS, FaultProxy, FaultRates
from harness.fault_proxy import parse_rates as proxy_rates
from harness.faults import ExecutedFault, ScheduledFault, plan_faults
from harness.injectors import (
    Injector,
    RestartableAzurite,
    fault_proxies,
    injected_errors,
    lease_holders,
    proxied_connection_string,
    proxy_counts,
)
from harness.invariants import Invariant
from shared.imports.keys import LEASE_KEY

log = logging.getLogger("harness.chaos")

#: Network faults per new connection from an instance to Azurite. Stalls outlast the storage
#: clients' retries of one request only when several hit in a row, so the flows slow down and
#: retry but are not starved.
RATES = FaultRates(reset=0.05, stall=0.03, latency=0.1, stall_seconds=30.0, latency_seconds=0.2)
#: The leases a pause stops the holder of: the imports' per-account lease ("import-{account}").
PAUSED_LEASES = LEASE_KEY.partition("{")[0]


@dataclass
class ChaosReport:
    seed: int
    instances: int
    seconds: float
    run_id: str
    faults: dict[str, Any]
    invariants: list[Invariant]
    settled: bool
    settle_s: float
    elapsed_s: float
    workload: dict[str, int]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(i.held for i in self.invariants)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {**data, "ok": self.ok}

    def summary(self) -> str:
        lines = [
            f"chaos run {self.run_id}: seed {self.seed}, {self.instances} instances, "
            f"{self.seconds:.0f} s (+{self.settle_s:.0f} s to settle"
            + ("" if self.settled else ", did NOT settle")
            + ")",
            "  faults: " + ", ".join(f"{k} {v}" for k, v in self.faults["totals"].items()),
        ]
        for inv in self.invariants:
            shown = ", ".join(f"{k} {v}" for k, v in inv.numbers.items())
            lines.append(f"  {'held  ' if inv.held else 'BROKEN'} {inv.name}: {shown}")
        lines.append("OK: every invariant held" if self.ok else "FAILED")
        return "\n".join(lines)


@dataclass
class _Outcome:
    """What running the instances under faults left: to check and to report."""

    executed: list[ExecutedFault]
    settled: bool
    settle_s: float
    restarts: dict[int, int]


def _under_faults(
    workload: Workload,
    supervisor: Supervisor,
    azurite: RestartableAzurite,
    proxies: dict[str, FaultProxy],
    receiver: CallbackReceiver,
    schedule: list[ScheduledFault],
    settle_timeout: float,
) -> tuple[_Outcome, float]:
    """Feed and inject over the fault window, end the faults, then wait for the run to settle.
    Returns the outcome and the epoch of the run's zero."""
    gate, stop = threading.RLock(), threading.Event()  # gate: held while Azurite restarts
    direct = workload.storage
    injector = Injector(
        supervisor, azurite, gate=gate, stop=stop,
        find_holders=partial(lease_holders, direct, workload.namespace, PAUSED_LEASES),
    )  # fmt: skip
    started_at = injector.started_at = time.time()
    executed: list[ExecutedFault] = []
    feeder = threading.Thread(
        target=workload.feed, args=(workload.timeline(receiver.url), started_at, gate, stop),
        name="chaos-feed", daemon=True,
    )  # fmt: skip
    faults = threading.Thread(
        target=lambda: executed.extend(injector.inject(schedule, workload.faults_end)),
        name="chaos-faults", daemon=True,
    )  # fmt: skip
    settled, settle_s = False, 0.0
    try:
        feeder.start()
        faults.start()
        stop.wait(max(0.0, started_at + workload.faults_end - time.time()))
        for proxy in proxies.values():
            proxy.set_enabled(False)  # the network faults end with the window
        feeder.join()
        faults.join()
        injector.resume_all()
        settled, settle_s = _settle(workload, receiver, settle_timeout)
    finally:
        stop.set()
        injector.resume_all()
    return _Outcome(executed, settled, settle_s, supervisor.restarts()), started_at


def _settle(workload: Workload, receiver: CallbackReceiver, limit: float) -> tuple[bool, float]:
    """Wait (up to `limit` s) until every flow finished; (settled, seconds waited)."""
    began = time.monotonic()
    store = workload.job_run.store()
    while time.monotonic() - began < limit:
        with contextlib.suppress(Exception):
            if invariants.settled(workload, store, receiver):
                return True, time.monotonic() - began
        time.sleep(1.0)
    return False, time.monotonic() - began


def _totals(executed: list[ExecutedFault], counts: dict[str, dict[str, int]]) -> dict[str, int]:
    """Faults injected by kind (the proxies' request counts are not faults: left out)."""
    totals: dict[str, int] = {}
    for fault in executed:
        totals[fault.kind] = totals.get(fault.kind, 0) + int(fault.injected)
    for by_kind in counts.values():
        for kind, n in by_kind.items():
            if kind != "requests":
                totals[kind] = totals.get(kind, 0) + n
    return totals


def _write_fault_log(path: str, proxies: dict[str, FaultProxy], started_at: float) -> None:
    """Every server error the proxies answered, one JSON object a line, `at` in seconds after
    the run's zero (as the schedule's and the invariants' times are)."""
    with open(path, "w", encoding="utf-8") as out:
        for error in injected_errors(proxies):
            noted = {**error.as_dict(), "at": round(error.at - started_at, 3)}
            out.write(json.dumps(noted) + "\n")


def _configure_this_process(workload: Workload, app_dir: str) -> AppSettings:
    """This process's own settings, once, before any instance starts: the app's settings with
    the private Azurite (direct, not proxied) and the run's names, for the readers the harness
    shares with the app and the library (job store, outbox, `blobsingleton.ops` listings all
    read their connection and container names from settings). The instances do not depend on
    it: `Workload.options` gives them every setting of the run explicitly (their storage the
    proxied one), over the environment a process inherits, as `func start` does."""
    apply_settings({"AzureWebJobsStorage": workload.storage.connection_string})
    app_settings = kit.use_app_settings(app_dir)
    apply_settings(workload.settings())
    return app_settings


def run(
    instances: int = 8,
    seconds: float = 180.0,
    seed: int = 1,
    *,
    app_module: str = "function_app",
    app_dir: str = ".",
    log_level: str = "WARNING",
    log_file: str | None = None,
    settle_timeout: float | None = None,
    rates: FaultRates = RATES,
    scheduled: bool = True,
    fault_log: str | None = None,
) -> ChaosReport:
    """One chaos run on a private Azurite (its data in a temporary folder, removed after).

    `scheduled=False`: no process or service faults (kills, pauses, the Azurite restart),
    only what `rates` injects through the proxies. `fault_log`: where every server error the
    proxies answered is written (JSON lines)."""
    began = time.monotonic()
    schedule = plan_faults(seed, seconds, instances) if scheduled else []
    azurite = RestartableAzurite()
    try:
        azurite.start()
        # the harness's own reads and writes, retried to outlast the faults (`kit`)
        direct = kit.harness_account(StorageAccount(connection_string=azurite.connection_string))
        workload = Workload(instances, seconds, schedule, direct)
        app_settings = _configure_this_process(workload, app_dir)
        with fault_proxies(azurite, seed, rates) as proxies, CallbackReceiver() as receiver:
            workload.prepare()
            options = workload.options(
                proxied_connection_string(proxies), app_module, app_dir,
                log_level=log_level, log_file=log_file,
            )  # fmt: skip
            log.info("chaos run %s: %d instances, %.0f s, seed %d; schedule %s", workload.run_id,
                     instances, seconds, seed, [f.as_dict() for f in schedule])  # fmt: skip
            limit = settle_timeout if settle_timeout is not None else max(180.0, seconds)
            with kit.running(options, app_settings) as supervisor:
                outcome, started_at = _under_faults(
                    workload, supervisor, azurite, proxies, receiver, schedule, limit
                )
            checked = invariants.observe(workload, receiver, outcome.executed, started_at)
            counts = proxy_counts(proxies)
            if fault_log:
                _write_fault_log(fault_log, proxies, started_at)
        return ChaosReport(
            seed=seed,
            instances=instances,
            seconds=seconds,
            run_id=workload.run_id,
            faults={
                "scheduled": [f.as_dict() for f in schedule],
                "executed": [f.as_dict() for f in outcome.executed],
                "proxy": counts,
                "totals": _totals(outcome.executed, counts),
                "restarts_by_instance": {str(k): v for k, v in sorted(outcome.restarts.items())},
            },
            invariants=checked,
            settled=outcome.settled,
            settle_s=round(outcome.settle_s, 1),
            elapsed_s=round(time.monotonic() - began, 1),
            workload={
                "events": workload.events,
                "deliveries": workload.events * instances,
                "accounts": len(workload.accounts),
                "rows_per_account": workload.rows_per_account,
                "jobs": len(workload.job_ids),
                "units_per_job": UNITS_PER_JOB,
                "hostile_bodies": sum(len(b) for b in HOSTILE.values()),
            },
            notes=[f"feeding error: {e!r}" for e in workload.errors],
        )
    finally:
        azurite.stop()
        shutil.rmtree(azurite.data_dir, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8, choices=range(1, 65), metavar="N")
    parser.add_argument("--minutes", type=float, default=3.0, help="run length (faults: 75%%)")
    parser.add_argument("--seed", type=int, default=1, help="the same seed, the same schedule")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--settle-timeout", type=float, default=None,
        help="seconds to wait for the queues to drain after the faults (default: max(180, run))",
    )  # fmt: skip
    parser.add_argument("--log-file", default=None, help="the instances' log (default: stderr)")
    parser.add_argument(
        "--fault-rates", type=parse_rates, default=RATES, metavar="reset=P,stall=P,latency=P",
        help=f"network faults per new connection (default reset={RATES.reset},"
        f"stall={RATES.stall},latency={RATES.latency}); also takes the server errors",
    )  # fmt: skip
    parser.add_argument(
        "--server-errors", type=_server_errors, default=None, metavar="503=P,500=P",
        help="storage answers as Azure's under load, per request on every service: 503 "
        "ServerBusy not forwarded, 500 OperationTimedOut / InternalError (half each) after "
        "the request landed",
    )  # fmt: skip
    parser.add_argument(
        "--only-server-errors", action="store_true",
        help="no kills, pauses, Azurite restart or network faults: the server errors alone",
    )  # fmt: skip
    parser.add_argument(
        "--fault-log", default=None, metavar="PATH",
        help="write every server error injected (JSON lines, times after the run's zero)",
    )  # fmt: skip


def parse_rates(text: str, defaults: FaultRates = RATES) -> FaultRates:
    """`reset=0.1,stall=0.05` (or `503=0.03,500=0.03`) on top of `defaults` (a short run
    needs more to see each)."""
    try:
        return proxy_rates(text, defaults)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _server_errors(text: str) -> str:
    """The `--server-errors` text, refused at parse time if it names anything else."""
    rates = parse_rates(text, FaultRates())
    if any(getattr(rates, kind) for kind in FAULT_KINDS):
        raise argparse.ArgumentTypeError("--server-errors takes 503=P,500=P (or their names)")
    return text


def chosen_rates(args: argparse.Namespace) -> FaultRates:
    """The run's rates: the network faults (none with --only-server-errors), plus the
    server errors asked for."""
    base: FaultRates = args.fault_rates
    if args.only_server_errors:
        if not args.server_errors:
            raise SystemExit("harness chaos: --only-server-errors needs --server-errors")
        base = FaultRates(stall_seconds=base.stall_seconds, latency_seconds=base.latency_seconds)
    return parse_rates(args.server_errors, base) if args.server_errors else base


def main(args: argparse.Namespace) -> int:
    seconds = args.minutes * 60.0
    if seconds < 20:
        raise SystemExit("harness chaos: --minutes must be at least 1/3 (20 s)")
    report = run(
        args.instances, seconds, args.seed, app_module=args.app, app_dir=args.app_dir,
        log_level=args.log_level, log_file=args.log_file, settle_timeout=args.settle_timeout,
        rates=chosen_rates(args), scheduled=not args.only_server_errors, fault_log=args.fault_log,
    )  # fmt: skip
    if args.json:
        print(json.dumps(report.to_dict(), default=str), flush=True)
    else:
        print(report.summary(), flush=True)
    return 0 if report.ok else 1
