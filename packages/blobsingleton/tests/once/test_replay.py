"""A duplicate gets what the first call returned: every result type rebuilt equal, never the
object another call holds, or a loud error; and the replay can be seen (`on_replay`, an
`event=replay` record). In memory and on Azurite (where the result crosses a real blob and
its metadata, and a new process that never saw the key reads it)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, NamedTuple

import azure.functions as func
import pytest
from blobsingleton import once
from blobsingleton.errors import ResultNotStorable
from blobsingleton.results import DefaultCodec
from blobsingleton.testing import forget_remembered_records, memory_backends


@dataclasses.dataclass
class Shipment:
    order: str
    amount: Decimal
    when: dt.datetime
    lines: list[Line]
    seen: set[str] = dataclasses.field(default_factory=set)
    count: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.count = len(self.lines)


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int


class Colour(enum.Enum):
    RED = "red"


class Point(NamedTuple):
    x: int
    y: int


SHIPMENT = Shipment(
    "o-1", Decimal("10.10"), dt.datetime(2026, 11, 25, 9, 30, tzinfo=dt.UTC),
    [Line("a", 1), Line("b", 2)], {"x"},
)  # fmt: skip
RESULTS: dict[str, Any] = {
    "json": {"sent": 1, "ids": ["a", "b"], "nested": {"ok": True, "none": None}},
    "none": None,
    "dataclass": SHIPMENT,
    "decimal in a dict": {"total": Decimal("19.99"), "tax": Decimal("0.00")},
    "datetime and friends": [
        dt.datetime(2026, 11, 25, 1, 2, 3, 456789),
        dt.date(2026, 2, 28),
        dt.time(23, 59),
        dt.timedelta(days=1, seconds=5),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
    ],
    "containers": (1, frozenset({2}), {3}, {4: "int key"}, b"\x00bytes", bytearray(b"ba")),
    "a dict with the tag as a key": {"$t": "not a tag", "other": 1},
    "enum and named tuple": [Colour.RED, Point(1, 2)],
    "floats": [0.1, float("inf"), -0.0],
}


def http_response() -> func.HttpResponse:
    response = func.HttpResponse(
        '{"accepted": true}', status_code=201, mimetype="application/json", charset="utf-8",
        headers={"Location": "/api/orders/1", "X-Request": "abc"},
    )  # fmt: skip
    response.headers.add_header("Set-Cookie", "a=1")
    response.headers.add_header("Set-Cookie", "b=2")
    return response


def as_seen(response: func.HttpResponse) -> tuple[Any, ...]:
    return (response.status_code, sorted(response.headers.items()), response.get_body(),
            response.mimetype, response.charset)  # fmt: skip


# The Azurite case asks for storage_env at run time, where collection cannot see it: marked.
@pytest.fixture(params=["memory", pytest.param("azurite", marks=pytest.mark.services)])
def where(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "memory":
        with memory_backends():
            yield "memory"
    else:
        request.getfixturevalue("storage_env")
        yield "azurite"


def replayed(where: str, make: Callable[[], Any], **options: Any) -> tuple[Any, Any, list[int]]:
    """The first call's result and a duplicate's (from storage, as another process reads it)."""
    runs: list[int] = []
    key = uuid.uuid4().hex

    @once("result-{key}", **options)
    def work(key: str) -> Any:
        runs.append(1)
        return make()

    first = work(key)
    forget_remembered_records()
    return first, work(key), runs


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_every_result_comes_back_equal_and_fresh(where: str, name: str) -> None:
    first, duplicate, runs = replayed(where, lambda: RESULTS[name])
    assert runs == [1]
    assert duplicate == RESULTS[name] and type(duplicate) is type(RESULTS[name])
    if RESULTS[name] is not None:
        assert duplicate is not first


def test_a_dataclass_comes_back_as_itself_with_its_computed_fields(where: str) -> None:
    _first, duplicate, _ = replayed(where, lambda: SHIPMENT)
    assert isinstance(duplicate, Shipment) and duplicate == SHIPMENT
    assert duplicate.count == 2 and isinstance(duplicate.lines[0], Line)
    assert isinstance(duplicate.amount, Decimal) and duplicate.when.tzinfo is not None


def test_an_http_response_comes_back_as_the_first_response(where: str) -> None:
    first, duplicate, runs = replayed(where, http_response)
    assert runs == [1] and isinstance(duplicate, func.HttpResponse)
    assert as_seen(duplicate) == as_seen(first)


def test_a_replay_in_the_same_process_is_not_the_object_a_caller_changed() -> None:
    with memory_backends():

        @once("mutated")
        def work() -> dict[str, Any]:
            return {"headers": {"a": "1"}}

        first = work()
        first["headers"]["added-by-caller"] = "x"
        again = work()
        assert again == {"headers": {"a": "1"}}
        again["headers"]["b"] = "2"
        assert work() == {"headers": {"a": "1"}}


def test_a_result_that_cannot_be_stored_is_refused_at_the_first_call_once(where: str) -> None:
    runs: list[int] = []

    class Opaque:
        pass

    @once("opaque-{n}")
    def work(n: int) -> Any:
        runs.append(n)
        return Opaque()

    with pytest.raises(ResultNotStorable, match="Opaque") as caught:
        work(1)
    assert isinstance(caught.value, TypeError)
    forget_remembered_records()
    with pytest.raises(ResultNotStorable, match="Opaque"):
        work(1)  # a duplicate gets the loud error, never None, and the work never runs again
    assert runs == [1]


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents

    def __hash__(self) -> int:
        return self.cents


class MoneyCodec:
    def encode(self, result: Money) -> int:
        if not isinstance(result, Money):
            raise TypeError(f"not money: {type(result).__name__}")
        return result.cents

    def decode(self, data: int) -> Money:
        return Money(data)


def test_a_codec_of_the_users_own_stores_other_types(where: str) -> None:
    first, duplicate, runs = replayed(where, lambda: Money(1999), result=MoneyCodec())
    assert duplicate == Money(1999) and duplicate is not first and runs == [1]


class WithMoney(DefaultCodec):
    """The default codec and one type more, found wherever it is nested."""

    def encode(self, result: Any) -> Any:
        if isinstance(result, Money):
            return {"$money": result.cents}
        return super().encode(result)

    def decode(self, data: Any) -> Any:
        if isinstance(data, dict) and set(data) == {"$money"}:
            return Money(data["$money"])
        return super().decode(data)


def test_a_subclass_of_the_default_codec_finds_its_type_nested(where: str) -> None:
    def result() -> Any:
        return {"lines": [Money(100), (Money(250), Decimal("0.5"))], "by_day": {1: Money(7)}}

    first, duplicate, _ = replayed(where, result, result=WithMoney())
    assert duplicate == first and duplicate is not first
    assert type(duplicate["lines"][1]) is tuple and duplicate["by_day"] == {1: Money(7)}


def test_on_replay_gets_the_stored_result_and_what_it_returns_is_returned(where: str) -> None:
    seen: list[Any] = []

    def on_replay(result: dict[str, Any]) -> dict[str, Any]:
        seen.append(result)
        return {**result, "replayed": True}

    first, duplicate, _ = replayed(where, lambda: {"sent": 1}, on_replay=on_replay)
    assert first == {"sent": 1} and seen == [{"sent": 1}]
    assert duplicate == {"sent": 1, "replayed": True}


def test_a_replay_is_an_event_record(where: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="blobsingleton.events")
    replayed(where, lambda: 1)
    events = [r.getMessage() for r in caplog.records if r.name == "blobsingleton.events"]
    replays = [e for e in events if e.startswith("event=replay ")]
    assert len(replays) == 1 and "key=result-" in replays[0] and "function=" in replays[0]


def test_the_stored_form_is_json_a_person_can_read(storage_env: str) -> None:
    from blobsingleton.config import scope_of
    from blobsingleton.records import BlobRecordStore

    @once("readable")
    def work() -> Any:
        return {"total": Decimal("1.50"), "items": [1, 2]}

    work()
    record = BlobRecordStore(scope=scope_of(work)).get("readable")
    assert record is not None
    assert json.loads(record.to_json())["result"] == {
        "total": {"$t": "decimal", "v": "1.50"}, "items": [1, 2]
    }  # fmt: skip
