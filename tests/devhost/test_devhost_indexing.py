"""Indexing reads the app's real bindings; %SETTING% resolves from app settings."""

from __future__ import annotations

import pytest
from blobsingleton.errors import SettingMissing
from devhost_testkit import HERE, SAMPLE_APP

from devhost.indexing import HttpTrigger, QueueTrigger, TimerTrigger, load_functions


def test_indexing_reads_the_bindings_of_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    functions = {f.name: f for f in load_functions(SAMPLE_APP, HERE)}
    assert set(functions) == {
        "sample_queue",
        "sample_timer",
        "sample_item",
        "sample_hello",
        "sample_order",
    }

    queue = functions["sample_queue"]
    assert queue.trigger == QueueTrigger(
        queue_name="%SAMPLE_QUEUE%", connection="AzureWebJobsStorage"
    )
    assert queue.arg_name == "msg"
    assert queue.user_function.__name__ == "sample_queue"
    monkeypatch.setenv("SAMPLE_QUEUE", "Orders-Queue")
    assert queue.trigger.resolved_queue_name() == "orders-queue"
    monkeypatch.delenv("SAMPLE_QUEUE")
    with pytest.raises(SettingMissing):
        queue.trigger.resolved_queue_name()

    timer = functions["sample_timer"]
    assert timer.trigger == TimerTrigger(
        schedule="%SAMPLE_SCHEDULE%", run_on_startup=False, use_monitor=True
    )
    assert timer.arg_name == "timer"

    item = functions["sample_item"]
    assert item.trigger == HttpTrigger(
        route="items/{item_id:int}", methods=("GET",), auth_level="function"
    )
    assert functions["sample_hello"].trigger == HttpTrigger(
        route="hello/{name?}", methods=None, auth_level="anonymous"
    )
