"""Where the operators' notes and tallies are kept: OPS_NOTES_CONTAINER ("ops-notes")."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from azure.core.exceptions import ResourceExistsError

from shared import storage
from shared.settings import setting

NOTES_CONTAINER = ("OPS_NOTES_CONTAINER", "ops-notes")


def notes_container() -> Any:
    name, default = NOTES_CONTAINER
    return storage.blob_service().get_container_client(setting(name) or default)


def ensure(container: Any) -> None:
    """Create the container if it is missing (once per process)."""
    if container.container_name in _created:
        return
    with contextlib.suppress(ResourceExistsError):
        container.create_container()
    _created.add(container.container_name)


_created: set[str] = set()


def iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()
