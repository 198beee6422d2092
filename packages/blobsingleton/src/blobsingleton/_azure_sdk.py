"""Every private attribute of the Azure SDK this library reads, in one place, each with a fallback.

Two, both about cost, never behaviour (the SDK versions they were read from are pinned in the
package's bounds, `azure-core<2` and `azure-storage-blob<13`; `tests/storage/test_sdk_internals.py`
fails on an upgrade that removes them):

- `pipeline_sender(container)`: the `ContainerClient`'s own pipeline (`_client._client`, its
  credential, retries, hooks and transport), so listings are sent as the SDK sends them and
  parsed without its models (`_listing`: a quarter of the CPU). Fallback: the SDK's
  `list_blobs`, which costs four times the client CPU per listed name.
- `response_hook(client)`: the `raw_response_hook` an application built its client with (the
  Storage SDK's `StorageResponseHook._response_callback`, among the pipeline's policies): a
  per-call hook replaces it, so the one the library passes to read storage's clock
  (`_storage.ServiceTime`) calls it in turn. Fallback: without it, such an application hook
  is not called for the library's reads and writes of run-once records.
"""

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
