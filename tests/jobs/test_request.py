"""Job request validation: every problem reported with its path, before anything is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.jobs import InvalidJob, JobRequest
from shared.jobs.callback_url import CallbackPolicy, parse_networks

CALLBACK = "http://127.0.0.1:9/cb"
LOCAL = CallbackPolicy(parse_networks("127.0.0.0/8", "test"), allow_http=True)


def parse(body: Any, max_units: int = 100) -> JobRequest:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return JobRequest.parse(raw, max_units=max_units, policy=LOCAL)


def problems(body: Any, max_units: int = 100) -> dict[str, str]:
    with pytest.raises(InvalidJob) as caught:
        parse(body, max_units)
    return {p.field: p.message for p in caught.value.problems}


def test_a_valid_request_keeps_units_in_order_and_gets_an_id() -> None:
    request = parse({"units": [{"id": "b", "payload": 1}, {"id": "a"}], "callback_url": CALLBACK})
    assert request.unit_ids == ["b", "a"]
    assert len(request.job_id) == 32
    assert list(request.units)[1].payload is None


def test_zero_units_is_a_valid_job() -> None:
    assert parse({"job_id": "empty", "units": [], "callback_url": CALLBACK}).units == []


def test_duplicate_unit_ids_are_refused() -> None:
    found = problems({"units": [{"id": "a"}, {"id": "b"}, {"id": "a"}], "callback_url": CALLBACK})
    assert found == {"units[2].id": "duplicate unit id 'a'"}


def test_too_many_units_are_refused_with_the_limit() -> None:
    body = {"units": [{"id": str(i)} for i in range(11)], "callback_url": CALLBACK}
    assert "limit is 10" in problems(body, max_units=10)["units"]


def test_every_problem_is_reported_at_once() -> None:
    body = {
        "job_id": "../etc",
        "units": [{"id": ""}, "x", {"id": "ok", "payload": "p" * (1024 * 1024 + 1)}],
        "callback_url": "http://169.254.169.254/",
    }
    assert set(problems(body)) == {
        "job_id",
        "units[0].id",
        "units[1]",
        "units[2].payload",
        "callback_url",
    }


@pytest.mark.parametrize("body", ["not json", "[1, 2]", b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_refused(body: Any) -> None:
    assert "$" in problems(body)


def test_missing_fields_are_named() -> None:
    assert set(problems({})) == {"units", "callback_url"}


def test_the_fingerprint_changes_with_units_and_callback_only() -> None:
    def job(payload: int, job_id: str = "j") -> JobRequest:
        units = [{"id": "x", "payload": {"k": payload}}]
        return parse({"job_id": job_id, "units": units, "callback_url": CALLBACK})

    a, b, again = job(1), job(2), job(1, job_id="another")
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == again.fingerprint()
