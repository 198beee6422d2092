"""Keys that cannot merge two events, and scopes that keep functions apart unless they share.

Empty, blank and non-scalar values are refused like missing ones (two messages without an id
must never be taken for one event); a record or lock is its function's own unless the
decorator says `scope="app"`; two `@singleton` on one function are refused when decorated;
`current_run()` shows what it documents. In memory, then on Azurite."""

from __future__ import annotations

import json
import logging
import threading
import unicodedata
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import BlobLease, Busy, current_lease, current_run, once, singleton
from blobsingleton.config import blob_name, scope_of
from blobsingleton.errors import InvalidKey, KeyTemplateError, PayloadMismatch
from blobsingleton.leases import read_lock
from blobsingleton.testing import memory_backends


def message(body: object) -> func.QueueMessage:
    return func.QueueMessage(id="m", body=json.dumps(body).encode())


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty or blank"),
        ("   ", "empty or blank"),
        ("\t\n", "empty or blank"),
        (None, "missing"),
        ([1, 2], "list, not a string"),
        ({"a": 1}, "dict, not a string"),
        (True, "bool, not a string"),
    ],
)
def test_a_key_value_that_names_nothing_is_refused(value: object, reason: str) -> None:
    runs: list[str] = []
    with memory_backends():

        @once("email-{event_id}")
        def send(msg: func.QueueMessage) -> None:
            runs.append("ran")

        with pytest.raises(KeyTemplateError, match=reason):
            send(message({"event_id": value}))
    assert runs == []


def test_two_messages_without_an_id_are_never_one_event() -> None:
    with memory_backends():
        sent: list[str] = []

        @once("email-{event_id}")
        def send(msg: func.QueueMessage) -> str:
            sent.append(msg.get_body().decode())
            return "sent"

        for body in ({"event_id": "", "to": "a"}, {"event_id": " ", "to": "b"}):
            with pytest.raises(KeyTemplateError):
                send(message(body))
        assert sent == []


def test_run_without_key_runs_unguarded_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with memory_backends() as memory:

        @once("email-{event_id}", run_without_key=True)
        def send(msg: func.QueueMessage) -> str:
            return "sent"

        caplog.set_level(logging.WARNING, logger="blobsingleton")
        assert send(message({"event_id": ""})) == "sent"
        assert send(message({"event_id": ""})) == "sent"  # no record: each runs
        assert memory.records_of(send).records == {}
    assert "without run-once protection" in caplog.text


def test_keys_are_one_key_whichever_way_unicode_spells_them() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert composed != decomposed and unicodedata.normalize("NFC", decomposed) == composed
    assert blob_name("ns", composed) == blob_name("ns", decomposed)
    with memory_backends():
        runs: list[str] = []

        @once("k-{name}")
        def work(name: str) -> None:
            runs.append(name)

        work(composed)
        work(decomposed)
        assert runs == [composed]


def test_a_key_whose_blob_name_is_too_long_for_azure_is_refused() -> None:
    key = "\U0001f600" * 100  # 100 characters, 1,200 once percent-encoded
    with pytest.raises(InvalidKey, match="1024"):
        blob_name("ns", key)


def test_two_functions_with_one_template_keep_their_own_records() -> None:
    with memory_backends():

        @once("email-{event_id}")
        def welcome(event_id: str) -> str:
            return "welcome"

        @once("email-{event_id}")
        def receipt(event_id: str) -> str:
            return "receipt"

        assert (welcome("e1"), receipt("e1")) == ("welcome", "receipt")
        assert (welcome("e1"), receipt("e1")) == ("welcome", "receipt")


def test_scope_app_shares_a_record_across_functions_on_purpose() -> None:
    with memory_backends() as memory:
        runs: list[str] = []

        @once("night-{day}", scope="app")
        def from_timer(day: str) -> str:
            runs.append("timer")
            return "imported"

        @once("night-{day}", scope="app")
        def from_http(day: str) -> str:
            runs.append("http")
            return "imported"

        assert from_timer("mon") == from_http("mon") == "imported"
        assert runs == ["timer"] and "night-mon" in memory.records.records


def test_two_singletons_on_one_function_are_refused_when_decorated() -> None:
    with pytest.raises(TypeError, match="two @singleton"):

        @singleton("a-{x}")
        @singleton("b-{x}")
        def work(x: str) -> None: ...


def test_a_singleton_over_a_once_is_one_singleton() -> None:
    @singleton("a-{x}")
    @once("a-{x}")
    def work(x: str) -> None: ...


def test_a_function_naming_several_keys_holds_them_all_taken_in_one_order() -> None:
    with memory_backends():
        seen: list[tuple[str, ...]] = []

        @singleton(["tenant-{tenant}", "account-{account}"], scope="app", on_busy=Busy.SKIP)
        def work(tenant: str, account: str) -> int:
            seen.append((current_lease("tenant-t1").key, current_lease("account-a1").key))
            with pytest.raises(LookupError, match="name the key"):
                current_lease()
            return current_lease("account-a1").token

        assert work("t1", "a1") == 1
        assert seen == [("tenant-t1", "account-a1")]


def test_current_run_shows_key_attempt_and_token() -> None:
    with memory_backends():
        seen: dict[str, Any] = {}

        @singleton("night-{day}", scope="app")
        @once("night-{day}", scope="app")
        def night(day: str) -> None:
            run = current_run()
            seen.update(key=run.key, attempt=run.attempt, token=run.token)

        night("mon")
        assert seen == {"key": "night-mon", "attempt": 1, "token": 1}

        @once("alone-{day}")
        def alone(day: str) -> int:
            assert current_run().token is None
            return current_run().attempt

        assert alone("mon") == 1


def test_a_payload_mapping_names_the_fields_that_differ() -> None:
    with memory_backends():

        @once("order-{id}", payload=lambda id, body: body)
        def work(id: str, body: dict[str, Any]) -> None: ...

        work("1", {"to": "a", "subject": "s", "text": "t"})
        work("1", {"to": "a", "subject": "s", "text": "t"})  # the same: a duplicate
        with pytest.raises(PayloadMismatch) as caught:
            work("1", {"to": "zed@example.com", "subject": "s", "text": "u"})
    assert caught.value.fields == ("text", "to") and "zed" not in str(caught.value)


# -- on Azurite ---------------------------------------------------------------------------------


def test_on_storage_two_functions_keep_their_own_record_and_lock(storage_env: str) -> None:
    @once("same-{n}")
    def first(n: int) -> str:
        return "first"

    @once("same-{n}")
    def second(n: int) -> str:
        return "second"

    assert (first(1), second(1), first(1), second(1)) == ("first", "second") * 2

    @singleton("same-{n}", on_busy=Busy.SKIP)
    def guarded(n: int) -> int:
        return current_lease().token

    with BlobLease("same-1"):  # the app's lock on the key: not this function's own
        assert guarded(1) == 1
    state = read_lock("same-1", scope=scope_of(guarded))
    assert state is not None and state.token == 1 and not state.leased


def test_on_storage_the_app_scope_is_the_lock_a_blob_lease_takes(storage_env: str) -> None:
    @singleton("shared-{n}", scope="app", on_busy=Busy.SKIP)
    def guarded(n: int) -> str:
        return "ran"

    holder = BlobLease("shared-1").acquire()
    try:
        assert guarded(1) is None  # busy: the same lock
    finally:
        holder.release()
    assert guarded(1) == "ran"


def test_on_storage_the_two_scopes_of_one_key_never_wait_on_each_other(storage_env: str) -> None:
    inside = threading.Event()
    release = threading.Event()

    @singleton("pair-{n}")
    def own(n: int) -> None:
        inside.set()
        release.wait(10)

    @singleton("pair-{n}", scope="app", wait_timeout=2)
    def shared(n: int) -> str:
        return "ran"

    thread = threading.Thread(target=own, args=(1,))
    thread.start()
    assert inside.wait(10)
    try:
        assert shared(1) == "ran"
    finally:
        release.set()
        thread.join(10)
