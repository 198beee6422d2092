"""The callback probes on devhost and Azurite, through POST /api/jobs: what is refused at
submission, and a slow receiver cut at its deadline while another job's callback goes out."""

from __future__ import annotations

import http.client
import json
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devhost.supervisor import HostOptions, Supervisor
from harness.callbacks import RECEIVER_SETTINGS, CallbackReceiver
from harness.services import free_port
from shared.jobs import JobSettings

ROOT = Path(__file__).resolve().parents[2]
JOB_FUNCTIONS = ["start_job", "get_job", "run_job_unit", "fail_job_unit", "announce_job"]


@contextmanager
def job_host(settings: dict[str, str | None]) -> Iterator[tuple[int, str]]:
    key, port = secrets.token_urlsafe(16), free_port()
    settings = {**settings, "DEVHOST_FUNCTION_KEY": key}
    options = HostOptions(
        app_dir=str(ROOT),
        http_port=port,
        functions=JOB_FUNCTIONS,
        drain_timeout=5,
        settings=settings,
    )
    with Supervisor(options):
        yield port, key


def request(port: int, key: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        raw = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=raw, headers={"x-functions-key": key})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


REFUSED = [
    "http://127.0.0.1:{port}/cb",
    "https://127.0.0.1:{port}/cb",
    "https://localhost:{port}/cb",
    "https://[::1]:{port}/cb",
    "https://2130706433:{port}/cb",
    "https://0x7f.0.0.1:{port}/cb",
    "https://0177.0.0.1:{port}/cb",
    "https://10.0.0.8/cb",
    "https://172.20.1.1/cb",
    "https://192.168.0.10/cb",
    "https://100.64.3.4/cb",
    "https://[fd00::5]/cb",
    "https://[::ffff:127.0.0.1]:{port}/cb",
    "https://[::7f00:1]:{port}/cb",  # IPv4-compatible ::127.0.0.1
    "https://[::a00:8]/cb",  # IPv4-compatible ::10.0.0.8
    "https://169.254.169.254/latest/meta-data/",
    "https://hooks.example.com/caf\u00e9",  # a non-ASCII path: refused here, not at the POST
]


def test_loopback_private_compatible_and_non_ascii_callbacks_are_refused_at_submission(
    jobs_env: JobSettings, app_settings: Any
) -> None:
    app_settings.set({name: "" for name in RECEIVER_SETTINGS})  # as deployed: nothing allowed
    with CallbackReceiver() as receiver, job_host({}) as (port, key):
        for template in REFUSED:
            url = template.format(port=receiver.port)
            status, answer = request(port, key, "POST", "/api/jobs",
                                     {"units": [], "callback_url": url})  # fmt: skip
            assert status == 400, url
            [problem] = answer["problems"]
            assert problem["field"] == "callback_url", url
    assert receiver.posts == []


def test_a_slow_receiver_is_cut_at_its_deadline_while_another_job_is_announced(
    jobs_env: JobSettings,
) -> None:
    settings = {**RECEIVER_SETTINGS, "JOB_CALLBACK_TIMEOUT": "2", "JOB_CALLBACK_ATTEMPTS": "1"}
    with CallbackReceiver() as slow, CallbackReceiver() as fast, job_host(settings) as (port, key):
        with slow.dribble(0.5):  # a byte every 0.5 s: no socket operation ever times out
            started = time.monotonic()
            job = {"job_id": "slow", "units": [], "callback_url": slow.url}
            status, _ = request(port, key, "POST", "/api/jobs", job)
            assert status == 202
            # The callback is not inside the request: the request ends before the callback's
            # 2 s deadline cuts it (ten times what the request takes on an idle machine).
            assert time.monotonic() - started < 2 and not slow.answered.is_set()
            assert slow.wait_for(lambda posts: len(posts) == 1, timeout=20)
            slow_arrived = time.monotonic()
            job = {"job_id": "fast", "units": [], "callback_url": fast.url}
            status, _ = request(port, key, "POST", "/api/jobs", job)
            assert status == 202
            assert fast.wait_for(lambda posts: len(posts) == 1, timeout=20)
            assert not slow.answered.is_set(), "the slow receiver was let go before the fast job"
            assert slow.answered.wait(10)
            held = time.monotonic() - slow_arrived
        # Cut at its 2 s, not before; the 10 x 2 s above it only tells the cut from none (the
        # dribbled answer would take 80 minutes).
        assert 1.5 < held < 10 * 2, f"the slow receiver held its caller {held:.1f} s"
        assert request(port, key, "GET", "/api/jobs/fast")[1]["announcement"]["state"] == (
            "delivered"
        )
        slow_job = request(port, key, "GET", "/api/jobs/slow")[1]
        assert slow_job["status"] == "succeeded" and slow_job["announcement"] is None
