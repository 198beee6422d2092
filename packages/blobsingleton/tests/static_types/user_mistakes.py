"""Mistakes a user makes that the decorators' types let mypy catch (each line: one error)."""

from __future__ import annotations

from blobsingleton import Busy, once, singleton


@once("email-{event_id}", on_in_progress=Busy.SKIP)
def send(event_id: str) -> str:
    return event_id


@singleton("report-{day}", on_busy=Busy.SKIP)
def report(day: str) -> int:
    return len(day)


send("e1").upper()  # MISTAKE: None when skipped
send(42)  # MISTAKE: the parameters are kept
report("mon") + 1  # MISTAKE: None when busy
send.each(["e1"]).values()[0].upper()  # MISTAKE: None for an item skipped
report.each(["mon"])  # MISTAKE: each is @once's
