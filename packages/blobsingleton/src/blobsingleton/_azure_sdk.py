"""Every private Azure SDK attribute the library reads, each with a fallback (docs/internals.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def pipeline_sender(container: Any) -> Callable[..., Any] | None:
    """The pipeline's `send_request` of a `ContainerClient`, or None (use `list_blobs`)."""
    generated = getattr(container, "_client", None)
    send = getattr(getattr(generated, "_client", None), "send_request", None)
    if send is None or not isinstance(getattr(container, "url", None), str):
        return None
    if not isinstance(getattr(container, "api_version", None), str):
        return None
    return send  # type: ignore[no-any-return]


def response_hook(client: Any) -> Callable[[Any], None] | None:
    """The `raw_response_hook` `client` was built with, or None."""
    for policy in getattr(getattr(client, "_pipeline", None), "_impl_policies", ()):
        callback = getattr(policy, "_response_callback", None)
        if callback is not None:
            return callback  # type: ignore[no-any-return]
    return None
