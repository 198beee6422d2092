"""Structured events: the library's own (`KINDS`) and an app's, on one logger.

    from blobsingleton import events
    events.emit("stale_writer", warning=True, key="import-acme", token=4)

Every record goes to the `blobsingleton.events` logger with ids, tokens and durations as
`extra` dimensions and as `key=value` pairs in the message (see the library's page)."""

from blobsingleton._events import KINDS, emit

__all__ = ["KINDS", "emit"]
