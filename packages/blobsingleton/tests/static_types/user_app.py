"""A user's app as a type checker sees it: checked by mypy --strict in test_types.py. Each
result is used as its type says, without a None check where the policy never gives None."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_type

import azure.functions as func
from blobsingleton import Busy, Mode, Storage, StorageAccount, once, singleton
from blobsingleton.batches import BatchResult, ItemResult

URL = "https://account.blob.core.windows.net"


@dataclass
class Receipt:
    order_id: str


@once("charge-{order_id}")  # Busy.WAIT: returns the function's result, or raises
def charge(order_id: str) -> Receipt:
    return Receipt(order_id)


@once("charge-{order_id}")
async def charge_async(order_id: str) -> Receipt:
    return Receipt(order_id)


@once("refund-{order_id}", busy=Busy.wait(timeout=5), mode=Mode.AT_LEAST_ONCE)
def refund(order_id: str) -> Receipt:  # the defaults, spelt out
    return Receipt(order_id)


@once("email-{event_id}", busy=Busy.SKIP)
def send(event_id: str) -> str:
    return event_id


@once("order-{order_id}", busy=Busy.defer(queue="%ORDERS_QUEUE%"))
def take_order(order_id: str, msg: func.QueueMessage) -> Receipt:
    return Receipt(order_id)


@once("report-{day}", mode=Mode.AT_MOST_ONCE)  # a crashed run is never rerun: None
def at_most_once(day: str) -> int:
    return len(day)


def conflict(error: Exception) -> int:
    return 409


@once("page-{n}", busy=conflict)  # busy: the policy's answer is the result
def page(n: int) -> int:
    return 200


@once("page-{n}", busy=Busy.answer(conflict, hold=0))  # an answer at once, no hold
def page_now(n: int) -> int:
    return 200


@once("charge-{order_id}", busy=Busy.WAIT, storage=Storage(namespace="billing"))
def charge_billing(order_id: str) -> Receipt:
    return Receipt(order_id)


@once("email-{event_id}", busy=Busy.skip(hold=1.0), storage=StorageAccount(blob_url=URL))
def send_held(event_id: str) -> str:
    return event_id


@singleton("import-{account}", busy=Busy.wait(timeout=5), storage=Storage(namespace="imports"))
def import_soon(account: str) -> int:
    return len(account)


@singleton("import-{account}")  # Busy.WAIT: runs, or raises
def import_account(account: str) -> int:
    return len(account)


@singleton("import-{account}")
async def import_account_async(account: str) -> int:
    return len(account)


@singleton("report-{day}", busy=Busy.SKIP)
def report(day: str) -> int:
    return len(day)


@singleton("import-{account}", busy=Busy.defer(queue="%IMPORT_QUEUE%"))
def deferred_import(account: str, msg: func.QueueMessage) -> int:
    return len(account)


@singleton("answer-{day}", busy=conflict)
def answer(day: str) -> int:
    return 200


async def main(msg: func.QueueMessage) -> None:
    print(charge("o1").order_id)  # no None check needed under WAIT
    print((await charge_async("o1")).order_id)
    assert_type(charge("o1"), Receipt)
    assert_type(await charge_async("o1"), Receipt)
    assert_type(refund("o1"), Receipt)
    assert_type(send("e1"), str | None)  # skipped: None
    assert_type(take_order("o1", msg), Receipt | None)  # deferred: None
    assert_type(at_most_once("mon"), int | None)
    assert_type(page(1), int)
    assert_type(page_now(1), int)
    assert_type(charge_billing("o1"), Receipt)
    assert_type(send_held("e1"), str | None)
    assert_type(import_soon("acme"), int)
    assert_type(import_account("acme"), int)
    assert_type(await import_account_async("acme"), int)
    assert_type(report("mon"), int | None)
    assert_type(deferred_import("acme", msg), int | None)
    assert_type(answer("mon"), int)
    assert_type(charge.each(["o1", "o2"]), BatchResult[Receipt])  # a batch: a result per item
    assert_type(charge.each(["o1"])[0], ItemResult[Receipt])
    assert_type(charge.each(["o1"]).values(), list[Receipt | None])  # None: an item not run
    assert_type(send.each(["e1"]), BatchResult[str | None])
    assert_type(await charge_async.each_async(["o1"]), BatchResult[Receipt])
