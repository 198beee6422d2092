"""Mistakes a new user makes fail where they are made, with the fix in the message (issue 48,
items 2 and 6): a decorator above the trigger's, a 0.4 parameter (its 0.5 spelling, for each
row of the changelog's migration table), a sync guarded function called on a running event
loop (a warning naming the async form), `.each` on an async function, a Cosmos DB batch given
to a function of one document. In memory: no storage."""

from __future__ import annotations

import asyncio
import inspect
import re
import warnings
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import Busy, once, singleton
from blobsingleton.errors import KeyTemplateError
from blobsingleton.testing import (
    cosmos_documents,
    event_hub_events,
    memory_backends,
    service_bus_messages,
)


def answer(error: Exception) -> str:
    return "busy"


#: Each 0.4 spelling (the changelog's migration table), and what its error must say.
RENAMED: list[tuple[str, dict[str, Any], str]] = [
    ("once", {"on_in_progress": Busy.SKIP}, "busy=Busy.skip()"),
    ("once", {"on_in_progress": Busy.WAIT, "wait_timeout": 90}, "busy=Busy.wait(timeout=90)"),
    ("once", {"wait_timeout": 90}, "busy=Busy.wait(timeout=90)"),
    (
        "once",
        {"on_in_progress": Busy.DEFER, "queue": "%Q%", "defer_seconds": 30, "hold_busy": 1.0},
        "busy=Busy.defer(queue='%Q%', after=30, hold=1.0)",
    ),
    ("once", {"on_in_progress": answer}, "busy=answer"),
    ("once", {"on_in_progress": answer, "hold_busy": 0.5}, "busy=Busy.answer(answer, hold=0.5)"),
    ("once", {"store": object()}, "storage=<the same store>"),
    ("once", {"namespace": "billing"}, "storage=Storage(namespace='billing')"),
    ("once", {"under_lease": True}, "nothing for under_lease"),
    ("singleton", {"on_busy": Busy.SKIP}, "busy=Busy.skip()"),
    ("singleton", {"queue": "%Q%"}, "busy=Busy.wait()"),
    ("singleton", {"container": object()}, "storage=Storage(container=<the container client>)"),
]


@pytest.mark.parametrize(("decorator", "given", "fix"), RENAMED)
def test_a_04_parameter_is_refused_with_its_05_spelling(
    decorator: str, given: dict[str, Any], fix: str
) -> None:
    factory: Any = {"once": once, "singleton": singleton}[decorator]
    with pytest.raises(TypeError) as raised:
        factory("charge-{order_id}", **given)
    message = str(raised.value)
    assert fix in message, message
    assert "removed in 0.5" in message and "0.5.0" in message
    for name in given:
        assert f"{name}=" in message


def test_the_renames_keep_the_decorators_signatures() -> None:
    assert "busy" in inspect.signature(once).parameters
    assert next(iter(inspect.signature(singleton).parameters)) == "key"


@pytest.mark.parametrize("decorator", [once, singleton])
def test_a_decorator_above_the_trigger_decorator_is_refused_naming_the_order(
    decorator: Any,
) -> None:
    app = func.FunctionApp()
    with pytest.raises(TypeError, match=r"above a trigger decorator.*under every @app") as raised:

        @decorator("charge-{order_id}")
        @app.queue_trigger(arg_name="msg", queue_name="orders", connection="AzureWebJobsStorage")
        def take_order(msg: func.QueueMessage) -> None: ...

    assert "unguarded" in str(raised.value)
    # The right order is indexed by azure-functions, the guarded function its user function:
    fine = func.FunctionApp()

    @fine.queue_trigger(arg_name="msg", queue_name="orders", connection="AzureWebJobsStorage")
    @decorator("charge-{order_id}")
    def take(msg: func.QueueMessage) -> None: ...

    [function] = fine.get_functions()
    assert function.get_function_name() == "take"


def test_a_sync_guarded_function_on_a_running_loop_warns_naming_the_async_form() -> None:
    @once("charge-{order_id}")
    def charge(order_id: str) -> str:
        return order_id

    async def handler() -> str:
        return charge("o1")  # blocks the loop

    async def right() -> str:
        return await asyncio.to_thread(charge, "o2")

    with memory_backends():
        with pytest.warns(RuntimeWarning, match=r"running event loop.*async def") as caught:
            assert asyncio.run(handler()) == "o1"
        assert caught[0].filename == __file__  # the caller's line, not the library's
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert asyncio.run(right()) == "o2"  # in a thread: no loop there, no warning
            assert charge("o3") == "o3"  # no loop at all


def test_each_on_an_async_function_names_each_async() -> None:
    @once("charge-{order_id}")
    async def charge(order_id: str) -> str:
        return order_id

    with pytest.raises(AttributeError, match=re.escape("await fn.each_async(items)")):
        charge.each(["o1"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("batch", "kind"),
    [
        (lambda: cosmos_documents([{"id": "a"}, {"id": "b"}]), "list of 2 Cosmos DB documents"),
        (lambda: service_bus_messages([{"id": "a"}, {"id": "b"}]), "list of 2 items"),
        (lambda: event_hub_events([{"id": "a"}, {"id": "b"}]), "list of 2 items"),
    ],
)
def test_a_batch_given_to_a_function_of_one_item_names_fn_each(batch: Any, kind: str) -> None:
    """A `func.DocumentList` is no `list`: its refusal names `fn.each` as the others' do."""

    @once("sync-{item.id}")
    def sync(item: Any) -> None: ...

    with memory_backends(), pytest.raises(KeyTemplateError) as raised:
        sync(batch())
    message = str(raised.value)
    assert kind in message and "fn.each(item)" in message, message
