"""The listeners of one app instance, built from the indexed functions and host.json."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from blobsingleton.errors import SettingMissing
from blobsingleton.schedules import InvalidSchedule

from devhost.blob_listener import BlobQueueListener, EventGridSource
from devhost.host_config import HostConfig, load_host_config
from devhost.http_server import HttpHost
from devhost.indexing import (
    BlobTrigger,
    HttpTrigger,
    IndexedFunction,
    IndexingError,
    QueueTrigger,
    TimerTrigger,
    UnsupportedTrigger,
    load_functions,
)
from devhost.queue_listener import QueueListener
from devhost.request_counting import RequestCounter, request_counter
from devhost.stats import WorkerStats
from devhost.timer_listener import TimerListener
from shared.settings import setting

if TYPE_CHECKING:
    from devhost.worker import WorkerConfig

log = logging.getLogger("devhost.instance")


@dataclass
class Instance:
    config: WorkerConfig
    functions: list[IndexedFunction]
    host: HostConfig
    stats: WorkerStats = field(default_factory=WorkerStats)
    host_counter: RequestCounter = field(default_factory=RequestCounter)
    listeners: list[QueueListener | TimerListener | EventGridSource] = field(default_factory=list)
    http: HttpHost | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, config: WorkerConfig) -> Instance:
        """Import and index the app (raises IndexingError) and read host.json."""
        functions = load_functions(config.app_module, config.app_dir)
        host = load_host_config(config.app_dir, os.environ)
        return cls(config=config, functions=functions, host=host)

    def enabled(self, function: IndexedFunction) -> bool:
        """Selected (`functions`) and not disabled by `AzureWebJobs.<name>.Disabled`."""
        if self.config.functions is not None and function.name not in self.config.functions:
            return False
        for name in (
            f"AzureWebJobs.{function.name}.Disabled",
            f"AzureWebJobs__{function.name}__Disabled",
        ):
            if (setting(name) or "").strip().lower() in ("true", "1"):
                log.info("%s: disabled by app setting %s", function.name, name)
                return False
        return True

    def start(self) -> None:
        """Start a listener per enabled function; a function whose binding cannot resolve is
        skipped with an error, like the host marks it "in error" and runs the others."""
        unknown = set(self.config.functions or ()) - {f.name for f in self.functions}
        if unknown:
            raise IndexingError(f"no such function(s) in the app: {', '.join(sorted(unknown))}")
        self.functions = [f for f in self.functions if self.enabled(f)]
        blob_functions: list[IndexedFunction] = []
        for function in self.functions:
            trigger = function.trigger
            try:
                if isinstance(trigger, QueueTrigger):
                    self.listeners.append(
                        QueueListener(function, self.host.queues, self.host_counter, self.stats)
                    )
                elif isinstance(trigger, TimerTrigger):
                    self.listeners.append(
                        TimerListener(function, self.host_counter, self.stats, self.config.timers)
                    )
                elif isinstance(trigger, BlobTrigger):
                    self.listeners.append(EventGridSource(function, self.host_counter))
                    blob_functions.append(function)
                elif isinstance(trigger, UnsupportedTrigger):
                    log.warning(
                        "%s: %s triggers are not supported by devhost: skipped",
                        function.name,
                        trigger.type,
                    )
                if function.other_bindings:
                    kinds = ", ".join(str(b.get("type")) for b in function.other_bindings)
                    log.warning(
                        "%s: bindings other than the trigger (%s) are not bound by devhost",
                        function.name,
                        kinds,
                    )
            except (SettingMissing, InvalidSchedule, ValueError) as error:
                self.errors[function.name] = str(error)
                log.error("%s: function is in error and will not run: %s", function.name, error)
        if blob_functions:  # one shared blob queue listener per instance, as the host's
            self.listeners.append(
                BlobQueueListener(blob_functions, self.host.queues, self.host_counter, self.stats)
            )
        http_functions = [f for f in self.functions if isinstance(f.trigger, HttpTrigger)]
        if http_functions and self.config.http_port is not None:
            self.http = HttpHost(
                http_functions,
                self.config.http_port + self.config.instance,
                self.config.function_key,
                self.stats,
                self.host.route_prefix,
                admin_key=self.config.admin_key,
            )
            self.http.start()
        for listener in self.listeners:
            listener.start()

    def stop(self, timeout: float) -> bool:
        """Stop taking work, then wait up to `timeout` s for in-flight invocations."""
        deadline = time.monotonic() + timeout
        for listener in self.listeners:
            listener.stop()
        if self.http is not None:
            self.http.stop()
        drained = True
        for listener in self.listeners:
            drained = listener.drain(max(0.0, deadline - time.monotonic())) and drained
        return self.stats.wait_idle(max(0.0, deadline - time.monotonic())) and drained

    def describe(self) -> dict[str, Any]:
        return {
            "functions": {f.name: type(f.trigger).__name__ for f in self.functions},
            "errors": dict(self.errors),
            "http_port": self.http.port if self.http else None,
        }

    def report(self, *, final: bool) -> dict[str, Any]:
        return {
            "kind": "stats",
            "instance": self.config.instance,
            "final": final,
            **self.stats.snapshot(),
            "host_storage_requests": self.host_counter.total(),
            "app_storage_requests": request_counter.total(),
            "app_blob_requests": request_counter.blob_total(),
        }
