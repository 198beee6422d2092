"""Mistakes a user makes that the decorators' types let mypy catch (each line: one error)."""

from __future__ import annotations

from dataclasses import dataclass

import azure.functions as func
from blobsingleton import Busy, Mode, once, singleton


@dataclass
class Receipt:
    order_id: str


@once("email-{event_id}", busy=Busy.SKIP)
def send(event_id: str) -> str:
    return event_id


@once("charge-{order_id}", busy=Busy.SKIP)
async def charge_async(order_id: str) -> Receipt:
    return Receipt(order_id)


@once("order-{order_id}", busy=Busy.defer(queue="%ORDERS_QUEUE%"))
def take_order(order_id: str, msg: func.QueueMessage) -> Receipt:
    return Receipt(order_id)


@once("charge-{order_id}", mode=Mode.AT_MOST_ONCE)
def charge_at_most_once(order_id: str) -> Receipt:
    return Receipt(order_id)


@once("charge-{order_id}")
def charge(order_id: str) -> Receipt:
    return Receipt(order_id)


@once("charge-{order_id}", busy=Busy.defer())  # MISTAKE: a deferral names its queue
def deferred(order_id: str, msg: func.QueueMessage) -> None: ...


@once("charge-{order_id}", on_in_progress=Busy.SKIP)  # MISTAKE: the old parameter is busy=
def old_spelling(order_id: str) -> None: ...


@singleton("report-{day}", busy=Busy.SKIP)
def report(day: str) -> int:
    return len(day)


async def main(msg: func.QueueMessage) -> None:
    send("e1").upper()  # MISTAKE: None when skipped
    print((await charge_async("o1")).order_id)  # MISTAKE: None when skipped
    print(take_order("o1", msg).order_id)  # MISTAKE: None when deferred
    print(charge_at_most_once("o1").order_id)  # MISTAKE: None once a run crashed
    charge(42)  # MISTAKE: the parameters are kept
    send(42)  # MISTAKE: the parameters are kept
    report("mon") + 1  # MISTAKE: None when busy
    send.each(["e1"]).values()[0].upper()  # MISTAKE: None for an item skipped
    report.each(["mon"])  # MISTAKE: each is @once's
    charge_async.each(["o1"])  # MISTAKE: an async function's batch is each_async
