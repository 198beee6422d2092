"""Release held leases when the process is asked to stop, so a waiter takes over at once.

Without this a stopped instance keeps its leases until they expire (up to a lease period).
`install_signal_handlers()` chains to whatever handler was installed before, so the host's
own shutdown still runs.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blobsingleton._lease import BaseLease

log = logging.getLogger("blobsingleton")

_held: weakref.WeakSet[BaseLease] = weakref.WeakSet()
_lock = threading.Lock()
_installed = False


def remember(lease: BaseLease) -> None:
    with _lock:
        _held.add(lease)


def forget(lease: BaseLease) -> None:
    with _lock:
        _held.discard(lease)


def held() -> list[BaseLease]:
    """The leases this process holds right now."""
    with _lock:
        return list(_held)


def release_all() -> int:
    """Release every lease this process holds; returns how many it released."""
    leases = held()
    for lease in leases:
        try:
            lease.release()
        except Exception:
            log.exception("could not release lease %s at shutdown", lease.key)
    if leases:
        log.info("released %d lease(s) at shutdown", len(leases))
    return len(leases)


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
    """On these signals release held leases, then run the previously installed handler."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    _installed = True
    atexit.register(release_all)
    for signum in signals:
        previous = signal.getsignal(signum)

        def handler(num: int, frame: FrameType | None, previous: Any = previous) -> None:
            release_all()
            if callable(previous):
                previous(num, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(num, signal.SIG_DFL)
                signal.raise_signal(num)

        signal.signal(signum, handler)
