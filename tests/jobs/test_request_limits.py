"""One job submission cannot exhaust an instance: a body is refused by its Content-Length
before it is read or parsed, and by the number of JSON values it holds before it is decoded.
The devhost tests measure the instance process's peak memory (VmHWM) around the request: a
32 MiB body of `[[],[],...]` took a worker from 93 MB to 1.6 GB when it was decoded."""

from __future__ import annotations

import http.client
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import azure.functions as func
import pytest

from devhost.supervisor import HostOptions, Supervisor
from harness.services import free_port
from shared import json_body
from shared.jobs import InvalidJob, JobRequest, JobSettings
from shared.jobs.request import MAX_REQUEST_BYTES, MAX_REQUEST_VALUES

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
#: The host's own limit when FUNCTIONS_REQUEST_BODY_SIZE_LIMIT is unset (the deployment and the
#: sample set 8 MiB): the function's own refusal is what the devhost tests measure.
HOST_DEFAULT_LIMIT = {"FUNCTIONS_REQUEST_BODY_SIZE_LIMIT": "104857600"}


def nested(size: int) -> bytes:
    """A job body of about `size` bytes: `{"units": [[],[],...]}`."""
    count = (size - 16) // 3
    return b'{"units":[' + b"[]," * count + b"[]]}"


def peak_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def test_a_body_with_too_many_values_is_refused_before_it_is_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def decoded(*args: object, **kwargs: object) -> object:
        raise AssertionError("the body was decoded")

    monkeypatch.setattr(json_body.json, "loads", decoded)
    body = nested(MAX_REQUEST_BYTES - 64)
    with pytest.raises(InvalidJob) as caught:
        JobRequest.parse(body, max_units=10)
    assert caught.value.problems[0].message == (
        f"body holds more than {MAX_REQUEST_VALUES} JSON values"
    )


def test_a_body_over_the_byte_limit_is_refused_before_it_is_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(json_body, "_within", lambda *a: pytest.fail("measured"))
    with pytest.raises(InvalidJob, match="the limit is 4194304"):
        JobRequest.parse(b" " * (MAX_REQUEST_BYTES + 1), max_units=10)


def test_the_function_answers_413_from_the_content_length_without_reading_the_body(
    jobs_env: JobSettings,
) -> None:
    from functions.jobs import start_job

    class Unread(func.HttpRequest):
        def get_body(self) -> bytes:
            raise AssertionError("the body was read")

    request = Unread(
        "POST", "http://localhost/api/jobs", body=b"", headers={"Content-Length": str(32 * MIB)}
    )
    response = start_job(request)
    assert response.status_code == 413
    answer = json.loads(response.get_body())
    assert answer["error"] == "request_too_large" and "units_blob" in answer["message"]


@pytest.fixture
def job_host(jobs_env: JobSettings) -> Iterator[tuple[Supervisor, int, str]]:
    """devhost serving the job functions on one instance: (host, port, function key)."""
    key, port = secrets.token_urlsafe(16), free_port()
    host = Supervisor(
        HostOptions(
            app_dir=str(ROOT), http_port=port, functions=["start_job", "get_job"],
            drain_timeout=5, settings={"DEVHOST_FUNCTION_KEY": key, **HOST_DEFAULT_LIMIT},
        )
    )  # fmt: skip
    host.start()
    try:
        yield host, port, key
    finally:
        host.stop()


def post(port: int, key: str, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        headers = {"x-functions-key": key, "Content-Type": "application/json"}
        connection.request("POST", "/api/jobs", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_32_mib_nested_body_is_refused_without_the_memory_rise(
    job_host: tuple[Supervisor, int, str],
) -> None:
    host, port, key = job_host
    pid = host.pid(0)
    assert pid is not None
    small = json.dumps({"units": [], "callback_url": "https://10.0.0.1/"}).encode()
    assert post(port, key, small)[0] == 400  # warmed up: the app imported, a request served
    before = peak_mb(pid)

    within_limit, answer = post(port, key, nested(MAX_REQUEST_BYTES - 64))
    assert within_limit == 400
    assert "more than 100000 JSON values" in json.loads(answer)["message"]
    counted = peak_mb(pid) - before  # decoded, these 4 MiB cost about 100 MB

    status, answer = post(port, key, nested(32 * MIB))
    assert (status, json.loads(answer)["error"]) == (413, "request_too_large")
    # devhost, like the host, holds the 32 MiB of bytes while it hands them over; decoded they
    # cost 1.5 GB
    refused = peak_mb(pid) - before
    print(f"peak before {before:.0f} MB; rise: 4 MiB body {counted:.0f} MB, 32 MiB {refused:.0f}")
    assert counted < 40, f"the 4 MiB body raised the peak by {counted:.0f} MB"
    assert refused < 100, f"the 32 MiB body raised the peak by {refused:.0f} MB"


def test_the_host_refuses_a_body_over_its_limit_before_reading_it(
    jobs_env: JobSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FUNCTIONS_REQUEST_BODY_SIZE_LIMIT (the deployment sets 8 MiB): answered from the
    headers alone, without waiting for a byte of the body."""
    monkeypatch.setenv("FUNCTIONS_REQUEST_BODY_SIZE_LIMIT", str(8 * MIB))
    key, port = secrets.token_urlsafe(16), free_port()
    options = HostOptions(app_dir=str(ROOT), http_port=port, functions=["start_job"],
                          drain_timeout=5, settings={"DEVHOST_FUNCTION_KEY": key})  # fmt: skip
    with Supervisor(options):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.putrequest("POST", "/api/jobs")
        connection.putheader("x-functions-key", key)
        connection.putheader("Content-Length", str(8 * MIB + 1))
        connection.endheaders()  # no body is ever sent
        response = connection.getresponse()
        assert response.status == 413
        connection.close()
