"""The lease machinery beyond `BlobLease`: fair waiting, several holders, its base class,
state, owner and process exit.

`FairLease`: a `BlobLease` whose waiters get the key in arrival order (what
`@singleton(busy=Busy.wait())` takes); `LeaseSemaphore`: up to N holders of one key, a slot
blob each (what `@singleton(key, limit=N)` takes); `TURNS_IN_A_ROW`: the turns a process
asking again at once may take in a row while others wait in its line. `BaseLease` owns
acquire/renew/release (a backend implements three private methods); `read_lock` shows a lock
as anyone sees it; `install_signal_handlers` and `release_all` give back what a process
holds when it stops. `DEFAULT_POLL_INTERVAL`: the mean seconds between a plain blocking
acquire's attempts (each jittered 0.5 to 1.5 times it)."""

from blobsingleton._blob_lease import LockState, read_lock
from blobsingleton._lease import DEFAULT_POLL_INTERVAL, BaseLease
from blobsingleton._line import TURNS as TURNS_IN_A_ROW
from blobsingleton._line import FairLease
from blobsingleton._owner import Owner, instance_id
from blobsingleton._semaphore import LeaseSemaphore
from blobsingleton._shutdown import install_signal_handlers, release_all

__all__ = [
    "DEFAULT_POLL_INTERVAL", "TURNS_IN_A_ROW", "BaseLease", "FairLease", "LeaseSemaphore",
    "LockState", "Owner", "install_signal_handlers", "instance_id", "read_lock", "release_all",
]  # fmt: skip
