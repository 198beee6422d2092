"""A live progress display for long runs on a terminal; nothing at all when piped.

The instances' own log goes to a file meanwhile (`HostOptions.log_file`), so the terminal
shows one panel that updates in place: deliveries handled out of the total, deferrals,
failures, instances alive, elapsed time and an estimate of the time left. Drawn with `rich`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.live import Live
from rich.table import Table

from devhost.supervisor import Supervisor, Totals

REFRESH = 0.25


def on_terminal() -> bool:
    """Whether a progress display belongs on stdout (not when piped, in CI or for `--json`)."""
    return sys.stdout.isatty()


def _panel(label: str, totals: Totals, expected: int, alive: int, elapsed: float) -> Table:
    done = totals.finished
    share = min(1.0, done / expected) if expected else 0.0
    left = (elapsed / share - elapsed) if share > 0.02 else None
    extra = max(0, totals.total_invocations - expected - sum(totals.failures.values()))
    bar = "#" * int(share * 30)
    table = Table.grid(padding=(0, 2))
    table.add_row(f"[bold]{label}[/]", f"[{bar:<30}] {share:4.0%}")
    table.add_row("deliveries handled", f"{min(done, expected)} of {expected}")
    table.add_row("deferred copies", str(extra))
    table.add_row("failed invocations", str(sum(totals.failures.values())))
    table.add_row("in flight / instances alive", f"{totals.in_flight} / {alive}")
    table.add_row("storage requests (app)", str(totals.app_storage_requests))
    eta = "estimating" if left is None else f"~{left:.0f} s"
    table.add_row("elapsed / left", f"{elapsed:.0f} s / {eta}")
    return table


@contextlib.contextmanager
def live(label: str, expected: int) -> Iterator[Callable[[Supervisor], None]]:
    """Yields `attach(supervisor)`: once called, the panel follows that run until the block ends."""
    if not on_terminal():
        yield lambda supervisor: None
        return
    stop = threading.Event()
    threads: list[threading.Thread] = []
    console = Console()

    def follow(supervisor: Supervisor) -> None:
        started = time.monotonic()
        with Live(console=console, refresh_per_second=1 / REFRESH, transient=True) as display:
            while not stop.wait(REFRESH):
                alive = len(supervisor.alive())
                display.update(
                    _panel(label, supervisor.totals(), expected, alive, time.monotonic() - started)
                )

    def attach(supervisor: Supervisor) -> None:
        thread = threading.Thread(target=follow, args=(supervisor,), daemon=True)
        thread.start()
        threads.append(thread)

    try:
        yield attach
    finally:
        stop.set()
        for thread in threads:
            thread.join(2)
