"""Who holds a lease: the owner record written to the lock blob's metadata so others can read
it, and this instance's id."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime


def instance_id() -> str:
    """`WEBSITE_INSTANCE_ID` on Azure; host name and pid elsewhere."""
    return os.environ.get("WEBSITE_INSTANCE_ID") or _host_and_pid()


_host: tuple[int, str] = (0, "")


def _host_and_pid() -> str:
    """This process's host name and pid, asked of the system once per process (a forked child
    asks again)."""
    global _host
    pid = os.getpid()
    if _host[0] != pid:
        _host = (pid, f"{socket.gethostname()}-{pid}")
    return _host[1]


@dataclass(frozen=True)
class Owner:
    """The holder of one acquisition of a lease."""

    instance: str = field(default_factory=instance_id)
    function: str = ""
    invocation_id: str = ""
    acquired_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    token: int | None = None

    def to_metadata(self) -> dict[str, str]:
        """Blob metadata (ASCII only, so non-ASCII values are escaped)."""
        values = {
            "instance": self.instance,
            "function": self.function,
            "invocationid": self.invocation_id,
            "acquiredat": self.acquired_at.isoformat(),
            "token": "" if self.token is None else str(self.token),
        }
        return {k: v.encode("ascii", "backslashreplace").decode() for k, v in values.items()}

    @classmethod
    def from_metadata(cls, metadata: dict[str, str]) -> Owner | None:
        """The owner recorded in `metadata`, or None where no owner was ever published."""
        if "instance" not in metadata:
            return None
        token = metadata.get("token")
        acquired = metadata.get("acquiredat")
        return cls(
            instance=metadata["instance"],
            function=metadata.get("function", ""),
            invocation_id=metadata.get("invocationid", ""),
            acquired_at=datetime.fromisoformat(acquired) if acquired else datetime.min,
            token=int(token) if token else None,
        )
