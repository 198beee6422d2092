"""Release held leases when the process ends or is asked to stop (docs/internals.md).

The exit hooks are registered when this process first holds a lease, not at import: an app
that imports the library and never takes a lease leaves its exit as it was."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger("blobsingleton")


class Releasable(Protocol):
    """What is given back at shutdown: a held lease (`_lease.BaseLease`)."""

    key: str

    def release(self) -> None: ...


_held: weakref.WeakSet[Releasable] = weakref.WeakSet()
#: What else gives leases back at shutdown (a `_line.LineMemory`'s `hand_on_all`, once it
#: kept a lease).
_also: list[Callable[[], int]] = []
_lock = threading.Lock()
_installed = False
_hooked = False


def remember(lease: Releasable) -> None:
    """`lease` is held: released at exit unless `forget` comes first."""
    with _lock:
        _held.add(lease)
        if not _hooked:
            _hook_exit()


def _hook_exit() -> None:
    """Once, at the process's first lease (with `_lock` held): a normal exit releases what it
    holds. The host kills a drained worker, which no handler survives: there each invocation's
    own release hands over. A `multiprocessing` child ends with `os._exit`, past atexit: its
    exit gives back what `also_release` keeps."""
    import multiprocessing.util  # here: importing it registers an atexit hook of its own

    global _hooked
    _hooked = True
    atexit.register(release_all)
    multiprocessing.util.Finalize(None, _release_also, exitpriority=100)


def forget(lease: Releasable) -> None:
    with _lock:
        _held.discard(lease)


def held() -> list[Releasable]:
    with _lock:
        return list(_held)


def also_release(release: Callable[[], int]) -> None:
    """Run `release` (returning how many leases it gave back) in every `release_all`, and at
    the exit of a `multiprocessing` child that held a lease."""
    _also.append(release)


def release_all() -> int:
    """Release every lease this process holds; returns how many it released."""
    leases = held()
    for lease in leases:
        try:
            lease.release()
        except Exception:
            log.exception("could not release lease %s at shutdown", lease.key)
    count = len(leases) + _release_also()
    if count:
        log.info("released %d lease(s) at shutdown", count)
    return count


def _release_also() -> int:
    count = 0
    for release in _also:
        try:
            count += release()
        except Exception:
            log.exception("could not give back kept leases at shutdown")
    return count


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
    """On these signals release held leases, then run the previously installed handler (the
    default one ends the process). Main thread only; a second call does nothing."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    _installed = True
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    released: set[int] = set()  # signals whose leases are given back: chain on the next delivery
    for signum in signals:
        previous = signal.getsignal(signum)

        def handler(num: int, frame: FrameType | None, previous: Any = previous) -> None:
            if num not in released:
                with contextlib.suppress(BlockingIOError):
                    os.write(wake_write, bytes([num]))
                return
            released.discard(num)
            if callable(previous):
                previous(num, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(num, signal.SIG_DFL)
                signal.raise_signal(num)

        signal.signal(signum, handler)

    def releaser() -> None:
        while True:
            for num in os.read(wake_read, 64):
                release_all()
                released.add(num)
                main = threading.main_thread().ident
                if main is not None:
                    signal.pthread_kill(main, num)

    threading.Thread(target=releaser, name="blobsingleton-signal-releaser", daemon=True).start()
