"""A user's app as a type checker sees it: checked by mypy --strict in test_types.py."""

from __future__ import annotations

from typing import assert_type

from blobsingleton import Busy, once, singleton
from blobsingleton.batches import BatchResult, ItemResult


@once("email-{event_id}", on_in_progress=Busy.SKIP)
def send(event_id: str) -> str:
    return event_id


@singleton("import-{account}")  # Busy.WAIT: runs, or raises
def import_account(account: str) -> int:
    return len(account)


@singleton("report-{day}", on_busy=Busy.SKIP)
def report(day: str) -> int:
    return len(day)


def conflict(error: Exception) -> int:
    return 409


@singleton("answer-{day}", on_busy=conflict)  # busy: the policy's answer is the result
def answer(day: str) -> int:
    return 200


@once("async-{n}")
async def fetch(n: int) -> bytes:
    return b""


async def main() -> None:
    assert_type(send("e1"), str | None)  # skipped or stored: maybe None
    assert_type(import_account("acme"), int)
    assert_type(report("mon"), int | None)
    assert_type(answer("mon"), int)
    assert_type(await fetch(1), bytes | None)
    assert_type(send.each(["e1", "e2"]), BatchResult[str])  # a batch: one result per item
    assert_type(send.each(["e1"])[0], ItemResult[str])
    assert_type(send.each(["e1"]).values(), list[str | None])
    assert_type(await fetch.each_async([1, 2]), BatchResult[bytes])
