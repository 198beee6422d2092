"""The chaos run's injectors: how each scheduled fault is carried out, and the network faults.

- `RestartableAzurite`: Azurite with its data on disk, stopped and started on the same ports.
- `fault_proxies`: one seeded `FaultProxy` per Azurite service (reset, stall, slow connections).
- `Injector`: carries out a schedule (`harness/faults.py`) on time: SIGKILL an instance,
  SIGSTOP the holder of a lease past its lease (then SIGCONT), restart Azurite.
- `lease_holders`: who holds which lease, read from storage through `blobsingleton.ops` (the
  lock blobs' owner records, and the in-progress run-once records run under a lease), never
  from the app's logs or its own blobs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from blobsingleton import StorageAccount, ops

from devhost.app_settings import instance_number
from devhost.supervisor import Supervisor
from harness import services
from harness.fault_proxy import (
    FAULT_KINDS,
    SERVER_ERROR_KINDS,
    FaultProxy,
    FaultRates,
    InjectedError,
)
from harness.faults import PAUSE_SECONDS, ExecutedFault, ScheduledFault

log = logging.getLogger("harness.chaos")

SERVICES = ("blob", "queue", "table")


class RestartableAzurite:
    """Azurite with its data on disk, stopped and started again on the same ports."""

    def __init__(self) -> None:
        self.data_dir = tempfile.mkdtemp(prefix="chaos-azurite-")
        self._stack: contextlib.ExitStack | None = None
        self.ports: tuple[int, int, int] | None = None
        self.connection_string = ""

    def start(self) -> None:
        stack = contextlib.ExitStack()
        running = stack.enter_context(services.azurite(self.data_dir, ports=self.ports))
        self._stack = stack
        self.ports = (running.blob_port, running.queue_port, running.table_port)
        self.connection_string = running.connection_string

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def restart(self) -> float:
        """Stop and start again; returns the seconds it was down."""
        began = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - began


@contextlib.contextmanager
def fault_proxies(
    azurite: RestartableAzurite | services.Azurite,
    seed: int,
    rates: FaultRates,
    spare: tuple[str, ...] = (),
) -> Iterator[dict[str, FaultProxy]]:
    """A seeded proxy in front of each of Azurite's services, by service name. `spare`:
    container (or queue, table) name prefixes whose requests never draw a server error."""
    ports = (
        azurite.ports
        if isinstance(azurite, RestartableAzurite)
        else (azurite.blob_port, azurite.queue_port, azurite.table_port)
    )
    assert ports is not None
    spared = tuple(f"/{services.AZURITE_ACCOUNT}/{prefix}" for prefix in spare)
    started: dict[str, FaultProxy] = {}
    try:
        for k, (name, port) in enumerate(zip(SERVICES, ports, strict=True)):
            proxy = FaultProxy(port, rates, seed=seed * 10 + k, service=name, spare=spared)
            started[name] = proxy.start()
        yield started
    finally:
        for proxy in started.values():
            proxy.stop()


def proxied_connection_string(proxies: dict[str, FaultProxy]) -> str:
    """The connection string the instances get: every service through its proxy."""
    ports = (proxies[s].listen_port for s in SERVICES)
    return services.azurite_connection_string("127.0.0.1", *ports)


def proxy_counts(proxies: dict[str, FaultProxy]) -> dict[str, dict[str, int]]:
    """Faults injected per service by kind, the server errors' only where they were on
    (with the requests that drew them)."""
    counts: dict[str, dict[str, int]] = {}
    for name, proxy in proxies.items():
        kinds = FAULT_KINDS + (SERVER_ERROR_KINDS if proxy.rates.per_request else ())
        counts[name] = {kind: int(proxy.counts.get(kind, 0)) for kind in kinds}
        if proxy.rates.per_request:
            counts[name]["requests"] = proxy.requests
    return counts


def injected_errors(proxies: dict[str, FaultProxy]) -> list[InjectedError]:
    """Every server error the proxies answered, oldest first."""
    return sorted((e for p in proxies.values() for e in p.injected), key=lambda e: e.at)


@dataclass(frozen=True)
class LeaseHolder:
    """A devhost instance that holds `key` (token `token` when read from the lock) since
    `since` (epoch seconds)."""

    instance: int
    key: str
    token: int | None
    since: float


def lease_holders(storage: StorageAccount, namespace: str, prefix: str) -> list[LeaseHolder]:
    """Holders of the leases whose key starts with `prefix`, read from storage.

    A held lock names its holder once the owner record is published (with the first renewal);
    sooner, an in-progress run-once record under the same prefix names its owner, the
    instance running it (a run guarded by a lease runs only while its instance holds it)."""
    found: list[LeaseHolder] = []
    for lock in ops.list_locks(prefix, limit=100, storage=storage, namespace=namespace).items:
        number = instance_number(lock["instance"])
        if lock["held"] and number is not None and lock["since"]:
            since = datetime.fromisoformat(str(lock["since"])).timestamp()
            found.append(LeaseHolder(number, str(lock["key"]), int(lock["token"]), since))
    runs = ops.list_runs(prefix, "in_progress", limit=100, storage=storage, namespace=namespace)
    for run in runs.items:
        number = instance_number(run["owner"])
        if number is not None and run["started"]:
            since = datetime.fromisoformat(str(run["started"])).timestamp()
            found.append(LeaseHolder(number, str(run["key"]), None, since))
    return found


class Injector:
    """Carries out a fault schedule against running instances and a restartable Azurite.

    `gate` is held while Azurite restarts (whoever feeds the run waits on it); `stop` ends
    waiting early; `find_holders` says who holds a lease now (`lease_holders`)."""

    def __init__(
        self,
        supervisor: Supervisor,
        azurite: RestartableAzurite,
        *,
        gate: threading.RLock,
        stop: threading.Event,
        find_holders: Callable[[], list[LeaseHolder]],
    ) -> None:
        self.supervisor, self.azurite = supervisor, azurite
        self.gate, self.stop, self.find_holders = gate, stop, find_holders
        self.started_at = 0.0  # epoch seconds of the schedule's zero
        self._paused: set[int] = set()
        self._killed_at: dict[int, float] = {}  # instance -> epoch of its last SIGKILL
        self._paused_lock = threading.Lock()

    def now(self) -> float:
        return round(time.time() - self.started_at, 2)

    def inject(self, schedule: list[ScheduledFault], until: float) -> list[ExecutedFault]:
        """Carry out the schedule on time (seconds after `started_at`). A pause waits, in its
        own thread, until `until` at most for a lease holder to show, never delaying the
        others."""
        done: dict[int, ExecutedFault] = {}
        helpers: list[threading.Thread] = []

        def carry_out(index: int, fault: ScheduledFault) -> None:
            try:
                result = self.execute(fault, until)
            except Exception as error:
                log.exception("fault %s failed", fault.kind)
                result = ExecutedFault(self.now(), fault.kind, fault.instance, None,
                                       f"error: {error!r}", injected=False)  # fmt: skip
            log.warning("fault at %.1f s: %s %s", result.at, result.kind, result.detail)
            done[index] = result

        for index, fault in enumerate(schedule):
            if self.stop.wait(max(0.0, self.started_at + fault.at - time.time())):
                break
            if fault.kind == "pause_lease_holder":
                helper = threading.Thread(target=carry_out, args=(index, fault), daemon=True)
                helper.start()
                helpers.append(helper)
            else:
                carry_out(index, fault)
        for helper in helpers:
            helper.join()
        return [done[i] for i in sorted(done)]

    def execute(self, fault: ScheduledFault, until: float) -> ExecutedFault:
        if fault.kind == "kill_instance":
            assert fault.instance is not None
            return self.kill(fault.instance)
        if fault.kind == "restart_azurite":
            with self.gate:
                at = self.now()
                down = self.azurite.restart()
            return ExecutedFault(at, fault.kind, detail=f"down {down:.1f} s, data kept")
        return self.pause_holder(until)

    def kill(self, instance: int) -> ExecutedFault:
        pid = self.supervisor.pid(instance)
        if pid is None:
            return ExecutedFault(self.now(), "kill_instance", instance, None, "no process",
                                 injected=False)  # fmt: skip
        os.kill(pid, signal.SIGKILL)
        self._killed_at[instance] = time.time()
        return ExecutedFault(self.now(), "kill_instance", instance, pid, "SIGKILL")

    def pause_holder(self, until: float) -> ExecutedFault:
        """SIGSTOP a running lease holder for PAUSE_SECONDS (past its lease)."""
        found = self._running_holder(self.started_at + until)
        if found is None:
            return ExecutedFault(self.now(), "pause_lease_holder", detail="no lease held",
                                 injected=False)  # fmt: skip
        holder, pid = found
        os.kill(pid, signal.SIGSTOP)
        at = self.now()
        with self._paused_lock:
            self._paused.add(pid)
        if not self.stop.wait(PAUSE_SECONDS):
            self._resume(pid)
        token = "" if holder.token is None else f" (token {holder.token})"
        detail = f"SIGSTOP holder of {holder.key}{token} for {PAUSE_SECONDS:.0f} s"
        return ExecutedFault(at, "pause_lease_holder", holder.instance, pid, detail)

    def _running_holder(self, until: float) -> tuple[LeaseHolder, int] | None:
        """A holder whose process runs and is not paused; a killed process's lease (held
        until it expires) is not its successor's."""
        while not self.stop.is_set() and time.time() < until:
            with self.gate:
                holders = self.find_holders()
            with self._paused_lock:
                paused = set(self._paused)
            for holder in holders:
                if holder.since < self._killed_at.get(holder.instance, 0.0):
                    continue
                pid = self.supervisor.pid(holder.instance)
                if pid is not None and pid not in paused:
                    return holder, pid
            self.stop.wait(0.2)
        return None

    def _resume(self, pid: int) -> None:
        with self._paused_lock:
            if pid not in self._paused:
                return
            self._paused.discard(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def resume_all(self) -> None:
        with self._paused_lock:
            paused = list(self._paused)
        for pid in paused:
            self._resume(pid)
