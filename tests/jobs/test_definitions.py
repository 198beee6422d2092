"""Jobs defined by reference to a JSON Lines blob: validated line by line with each bad line
named, streamed twice and never held whole, pinned to the blob's version."""

from __future__ import annotations

import json
import secrets
import uuid
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from devhost.supervisor import HostOptions, Supervisor
from harness.callbacks import CallbackReceiver
from harness.services import free_port
from shared import storage
from shared.jobs import InvalidJob, JobRequest, JobSettings, JobStore, submit_job
from shared.jobs.errors import DefinitionChanged
from tests.jobs.conftest import receive_all, run_units
from tests.jobs.test_request_limits import peak_mb, post
from tests.support import AppSettings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def definitions(jobs_env: JobSettings, app_settings: AppSettings) -> Any:
    """The definitions container of this test (created, as a client's would be)."""
    name = f"defs-{uuid.uuid4().hex[:10]}"
    app_settings.set({"JOB_DEFINITIONS_CONTAINER": name})
    container = storage.blob_service().get_container_client(name)
    container.create_container()
    return container


def lines(units: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(unit).encode() + b"\n" for unit in units)


def body(receiver: CallbackReceiver, blob: str, job_id: str = "by-ref") -> bytes:
    return json.dumps({"job_id": job_id, "units_blob": blob, "callback_url": receiver.url}).encode()


def start(raw: bytes) -> func.HttpResponse:
    from functions.jobs import start_job

    return start_job(func.HttpRequest("POST", "http://localhost/api/jobs", body=raw))


def test_a_job_defined_by_a_blob_runs_every_unit_and_posts_once(
    definitions: Any, receiver: CallbackReceiver
) -> None:
    units = [{"id": f"u{i:04d}", "payload": {"n": i, "pad": "x" * 60_000 * (i == 3)}}
             for i in range(120)]  # fmt: skip
    definitions.upload_blob("batch/units.jsonl", lines(units) + b"\n")  # a blank line: skipped
    response = start(body(receiver, "batch/units.jsonl"))
    assert response.status_code == 202, response.get_body()
    assert json.loads(response.get_body())["units"] == 120
    assert start(body(receiver, "batch/units.jsonl")).status_code == 200  # the same job again
    settings = JobSettings.from_env()
    assert JobStore(settings).get_payload("by-ref", "u0003") is not None  # too big: a blob
    assert run_units(settings) == 120
    [post_] = receiver.posts
    assert (post_.body["units_done"], post_.body["status"]) == (120, "succeeded")


def test_each_bad_line_is_named_and_nothing_is_stored(
    definitions: Any, receiver: CallbackReceiver
) -> None:
    too_many = b'{"id": "b", "payload": [' + b"[]," * 200_000 + b"[]]}\n"
    bad = lines([{"id": "a"}, {"id": "../x"}]) + b"not json\n" + lines([{"id": "a"}])
    bad += too_many + b"\xff\xfe\n"
    definitions.upload_blob("bad.jsonl", bad)
    response = start(body(receiver, "bad.jsonl"))
    assert response.status_code == 400
    problems = {p["field"]: p["message"] for p in json.loads(response.get_body())["problems"]}
    assert set(problems) == {
        "units_blob:line 2.id",
        "units_blob:line 3",
        "units_blob:line 4.id",
        "units_blob:line 5",
        "units_blob:line 6",
    }
    assert "duplicate unit id 'a'" in problems["units_blob:line 4.id"]
    assert "more than 100000 JSON values" in problems["units_blob:line 5"]
    assert "not UTF-8" in problems["units_blob:line 6"]
    assert JobStore(JobSettings.from_env()).read_job("by-ref") is None


@pytest.mark.parametrize(
    ("blob", "reason"),
    [("missing.jsonl", "no blob"), ("../x", ".. segments"), ("", "blob name")],
)
def test_a_blob_that_cannot_be_used_is_a_400(
    definitions: Any, receiver: CallbackReceiver, blob: str, reason: str
) -> None:
    response = start(body(receiver, blob))
    assert response.status_code == 400
    assert reason in response.get_body().decode()


def test_units_and_units_blob_together_are_refused(
    definitions: Any, receiver: CallbackReceiver
) -> None:
    raw = json.dumps({"units": [], "units_blob": "x", "callback_url": receiver.url})
    with pytest.raises(InvalidJob, match="not both"):
        JobRequest.parse(raw, max_units=10)


def test_more_units_than_the_limit_are_refused_without_reading_further(
    definitions: Any, receiver: CallbackReceiver
) -> None:
    definitions.upload_blob("many.jsonl", lines([{"id": f"u{i}"} for i in range(11)]))
    with pytest.raises(InvalidJob, match="more than 10 units"):
        JobRequest.parse(body(receiver, "many.jsonl"), max_units=10)


def test_a_blob_replaced_after_validation_stops_the_submission(
    definitions: Any, receiver: CallbackReceiver
) -> None:
    definitions.upload_blob("v.jsonl", lines([{"id": "a"}, {"id": "b"}]))
    request = JobRequest.parse(body(receiver, "v.jsonl", "pinned"), max_units=10)
    definitions.upload_blob("v.jsonl", lines([{"id": "c"}]), overwrite=True)
    with pytest.raises(DefinitionChanged):
        submit_job(request, JobStore(JobSettings.from_env()))
    assert receive_all(JobSettings.from_env()) == []


def test_a_20_mb_definition_is_streamed_without_the_memory_rise(
    definitions: Any, receiver: CallbackReceiver
) -> None:
    """devhost's instance submits it: its peak memory rises by far less than the blob."""
    units = [{"id": f"u{i:04d}", "payload": {"text": "y" * 20_000}} for i in range(1000)]
    definitions.upload_blob("big.jsonl", lines(units))
    key, port = secrets.token_urlsafe(16), free_port()
    options = HostOptions(app_dir=str(ROOT), http_port=port, functions=["start_job"],
                          drain_timeout=5, settings={"DEVHOST_FUNCTION_KEY": key})  # fmt: skip
    with Supervisor(options) as host:
        pid = host.pid(0)
        assert pid is not None
        warm = json.dumps({"units": [], "callback_url": "https://10.0.0.1/"}).encode()
        assert post(port, key, warm)[0] == 400
        before = peak_mb(pid)
        status, answer = post(port, key, body(receiver, "big.jsonl", "big"))
        rise = peak_mb(pid) - before
    assert status == 202, answer
    print(f"20 MB definition submitted: peak rise {rise:.0f} MB")
    assert rise < 15, f"the instance's peak memory rose by {rise:.0f} MB"
