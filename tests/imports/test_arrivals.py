"""A file dropped into an account's `incoming/` is imported on arrival (`import_arrival`).

Through devhost against Azurite: the app's real functions (`import_arrival`, the blob trigger
with the Event Grid source, and `import_account`, which runs the queued run) in two worker
processes; devhost delivers each blob written as Event Grid and the host do
(devhost/blob_listener.py), every event twice where a test asks for Event Grid's duplicates.
Each test waits on what storage shows (a report completed, a message queued), not on time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from blobsingleton import BlobLease

from devhost.supervisor import HostOptions, Supervisor
from harness import import_samples as samples
from shared.imports.arrivals import NotAnArrival, arrival_of, version_of
from shared.imports.request import ImportRequest, InvalidImportRequest
from tests.imports.support import ImportsEnv
from tests.support import AppSettings

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ["import_account", "import_arrival"]


def wait_for(predicate: Callable[[], Any], timeout: float = 90.0) -> Any:
    """Poll storage until `predicate()` holds; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture
def start_app(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path
) -> Iterator[Callable[..., Supervisor]]:
    """The app's import functions in 2 devhost instances, with a host id of this test's own
    (the test process shares it, so its leases are the app's)."""
    app_settings.set({"AzureFunctionsWebHost__hostid": f"arrivals-{uuid.uuid4().hex[:8]}"})
    started: list[Supervisor] = []

    def start(**settings: str) -> Supervisor:
        supervisor = Supervisor(HostOptions(
            instances=2, app_dir=str(ROOT), http_port=None, functions=FUNCTIONS,
            drain_timeout=10.0, stats_interval=0.2, log_file=str(tmp_path / "instances.log"),
            settings={
                "AzureFunctionsJobHost__extensions__queues__maxPollingInterval": "00:00:00.2",
                "DEVHOST_EVENT_GRID_POLL_INTERVAL": "0.1",
                "IMPORT_REPORT_TO": None,
                **settings,
            },
        ))  # fmt: skip
        supervisor.start()
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()


def runs(env: ImportsEnv, account: str, trigger: str = "arrival") -> list[str]:
    """The run ids of `account`'s runs of `trigger` that wrote a report."""
    names = env.blob_names(f"{account}/reports/")
    ids = {n.split("/")[2] for n in names if n.endswith("/report.json")}
    return sorted(i for i in ids if f"-{trigger}-" in i)


def completed(env: ImportsEnv, account: str, count: int = 1) -> list[dict[str, Any]]:
    """The reports of `account`'s arrival runs once `count` of them have completed."""
    reports = [env.read_json(f"{account}/reports/{r}/report.json") for r in runs(env, account)]
    done = [r for r in reports if r["status"] == "completed"]
    return done if len(done) >= count else []


def test_a_dropped_file_is_imported_once_on_arrival(
    imports_env: ImportsEnv, start_app: Callable[..., Supervisor]
) -> None:
    host = start_app()
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(5))))

    (report,) = wait_for(lambda: completed(imports_env, "acme"))
    assert host.wait_quiet(quiet=1.5, timeout=60)
    host.stop()
    assert report["trigger"] == "arrival" and report["totals"]["imported"] == 5
    assert [f["name"] for f in report["files"]] == ["a.csv"]
    assert len(runs(imports_env, "acme")) == 1
    assert imports_env.blob_names("acme/incoming/") == []
    assert imports_env.blob_names("acme/processed/") == [f"acme/processed/{report['run_id']}/a.csv"]
    assert len(imports_env.members("acme")) == 5
    totals = host.totals()  # every blob the run wrote was an event too: none started a run
    # (a delivery whose blob the run rewrote while it was read fails and is retried, as the
    # host's does: import_arrival may count a failure, the run none)
    assert totals.successes.get("import_account") == 1 and "import_account" not in totals.failures


def test_the_same_event_delivered_twice_to_two_instances_imports_once(
    imports_env: ImportsEnv, start_app: Callable[..., Supervisor]
) -> None:
    """Every event twice (Event Grid's at-least-once): both copies run `import_arrival`, on
    whichever instances take them, and the file's version starts one run."""
    host = start_app(DEVHOST_EVENT_GRID_DUPLICATES="true")
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(5))))

    wait_for(lambda: completed(imports_env, "acme"))
    assert host.wait_quiet(quiet=1.5, timeout=60)
    host.stop()
    (run_id,) = runs(imports_env, "acme")  # one version, one run
    log = Path(host.options.log_file or "").read_text()
    assert log.count(f"import arrival for acme: run {run_id}") == 2  # both copies ran
    assert host.totals().successes.get("import_account") == 1  # queued once, ran once
    members = imports_env.members("acme")
    assert len(members) == 5 and all(r["Status"] == "active" for r in members.values())


def test_an_overwrite_with_a_new_etag_imports_the_new_version(
    imports_env: ImportsEnv, start_app: Callable[..., Supervisor]
) -> None:
    first, second = list(samples.members(3)), list(samples.members(6))[3:]
    host = start_app(DEVHOST_EVENT_GRID_DUPLICATES="true")
    imports_env.upload("acme", "a.csv", samples.csv_bytes(first))
    wait_for(lambda: completed(imports_env, "acme"))
    wait_for(lambda: imports_env.blob_names("acme/incoming/") == [])
    imports_env.upload("acme", "a.csv", samples.csv_bytes(second))  # same name, new ETag

    reports = wait_for(lambda: completed(imports_env, "acme", count=2))
    assert host.wait_quiet(quiet=1.5, timeout=60)
    host.stop()
    assert len(runs(imports_env, "acme")) == 2
    assert sorted(r["totals"]["imported"] for r in reports) == [3, 3]
    processed = imports_env.blob_names("acme/processed/")
    assert sorted(processed) == sorted(f"acme/processed/{r['run_id']}/a.csv" for r in reports)
    assert len(imports_env.members("acme")) == 6  # both versions' members, each once


def test_an_arrival_while_the_account_imports_waits_for_the_lease(
    imports_env: ImportsEnv, start_app: Callable[..., Supervisor]
) -> None:
    """The nightly (or a manual) run holds the account's lease: the arrival's run is deferred,
    never started beside it, and runs after it with a higher fencing token."""
    host = start_app()
    with BlobLease("import-acme") as held:  # the lease every run of the account takes
        imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(4))))
        # its run queued and tried at least once under the held lease: deferred, not started
        wait_for(lambda: host.totals().successes.get("import_account", 0) >= 1)
        assert imports_env.blob_names("acme/reports/") == []
        assert imports_env.blob_names("acme/incoming/") == ["acme/incoming/a.csv"]
        held_token = held.token
    (report,) = wait_for(lambda: completed(imports_env, "acme"))
    host.stop()
    assert report["token"] > held_token
    assert report["totals"]["imported"] == 4
    state = imports_env.state("acme")
    assert state["Token"] == report["token"]  # every fence row written by the run's token
    rows = imports_env.members("acme").values()
    assert len(rows) == 4 and {r["FencingToken"] for r in rows} == {report["token"]}


def test_bad_content_is_rejected_whole_as_the_nightly_run_rejects_it(
    imports_env: ImportsEnv, start_app: Callable[..., Supervisor]
) -> None:
    host = start_app()
    imports_env.upload("acme", "bad.csv", b"not,the,header\n1,2,3\n")
    (report,) = wait_for(lambda: completed(imports_env, "acme"))
    host.stop()
    (file,) = report["files"]
    assert file["status"] == "rejected" and "header" in file["error"]
    run_id = report["run_id"]
    assert imports_env.blob_names(f"acme/rejected/{run_id}/") == [
        f"acme/rejected/{run_id}/bad.csv",
        f"acme/rejected/{run_id}/bad.csv.error.json",
    ]
    assert imports_env.members("acme") == {}


def test_a_file_name_the_run_refuses_starts_nothing_and_stays(
    imports_env: ImportsEnv, start_app: Callable[..., Supervisor]
) -> None:
    """A name over 512 characters is refused by the nightly run (left in incoming/, unread,
    listed as refused): on arrival it starts no run either; the other file still imports."""
    long_name = "x" * 600 + ".csv"
    host = start_app()
    imports_env.upload("acme", long_name, samples.csv_bytes(list(samples.members(2))))
    imports_env.upload("acme", "ok.csv", samples.csv_bytes(list(samples.members(2))))
    (report,) = wait_for(lambda: completed(imports_env, "acme"))
    assert host.wait_quiet(quiet=1.5, timeout=60)
    host.stop()
    assert len(runs(imports_env, "acme")) == 1  # ok.csv's; the long name started none
    refused = [f for f in report["files"] if f["status"] == "refused"]
    assert [f["name"] for f in refused] == [long_name]  # its run listed it, as nightly does
    assert imports_env.blob_names("acme/incoming/") == [f"acme/incoming/{long_name}"]
    totals = host.totals()  # a delivery retried because the run rewrote its blob is no run
    assert totals.successes.get("import_account") == 1 and "import_account" not in totals.failures


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("other/acme/incoming/a.csv", "not in the imports container"),
        ("imports/acme/processed/r/a.csv", "not an incoming file"),
        ("imports/acme/incoming/", "not an incoming file"),
        ("imports/a%b/incoming/a.csv", "account folder skipped"),
        ("imports/acme/incoming/x/../a.csv", "'..' path segment"),
    ],
)
def test_blobs_that_are_not_arrivals_are_told_apart(path: str, reason: str) -> None:
    with pytest.raises(NotAnArrival) as caught:
        arrival_of(path, "imports")
    assert reason in caught.value.reason
    found = arrival_of("imports/acme/incoming/sub/a.834", "imports")
    assert (found.account, found.file_name, found.blob_name) == (
        "acme", "sub/a.834", "acme/incoming/sub/a.834")  # fmt: skip


def test_an_arrival_run_is_named_by_its_file_version() -> None:
    """One version gives one run id (every delivery of its event queues the same run); another
    ETag of the same file gives another. The queue message round-trips as the others do."""
    found = arrival_of("imports/acme/incoming/a.csv", "imports")
    v1, v2 = version_of(found, '"0x1"'), version_of(found, '"0x2"')
    assert v1 == version_of(arrival_of("imports/acme/incoming/a.csv", "imports"), '"0x1"')
    assert v1 != v2 and len(v1) == 32
    request = ImportRequest.arrival("acme", date(2026, 11, 22), v1)
    assert request.run_id == f"2026-11-22-arrival-{v1[:8]}" and request.trigger == "arrival"
    assert ImportRequest.parse(request.to_json()) == request
    body = request.to_json().replace("arrival-", "arrivals-")
    with pytest.raises(InvalidImportRequest):
        ImportRequest.parse(body)
