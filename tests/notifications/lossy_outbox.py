"""An outbox sender whose storage requests may land and lose their answers (on Azurite)."""

from __future__ import annotations

from typing import Any

from shared.notifications import OutboxSender, Sender
from shared.notifications.outbox import outbox_container
from tests.support import LosesAnswers, blob_service_over


def outbox_writes(request: Any) -> bool:
    """An email's blob upload (not the container's creation)."""
    return request.method == "PUT" and "restype=container" not in request.url


def lossy_outbox(sender: Sender) -> tuple[OutboxSender, LosesAnswers]:
    """An outbox sender of this test's outbox container (created here) whose requests go
    through a `LosesAnswers`: `arm` it with `outbox_writes` to lose an email's answer."""
    transport = LosesAnswers()
    client = blob_service_over(transport).get_container_client(outbox_container())
    client.create_container()
    return OutboxSender(sender, client=client), transport
