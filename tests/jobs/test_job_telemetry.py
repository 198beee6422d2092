"""A batch job's completion through OpenTelemetry (shared.telemetry), against Azurite: counted
once however many deliveries and finalizers see the job end, and named on the span of the
invocation that recorded it."""

from __future__ import annotations

from opentelemetry import trace

from harness.callbacks import CallbackReceiver
from shared.jobs import Completion, JobSettings, JobStore, UnitState, finalize, record_unit
from tests.jobs.conftest import receive_all, submit, units
from tests.otel import Telemetry


def test_a_job_completion_is_counted_once_under_duplicate_deliveries_and_finalizers(
    jobs_env: JobSettings, receiver: CallbackReceiver, telemetry: Telemetry
) -> None:
    from functions.jobs import run_job_unit

    submit(jobs_env, receiver.url, units(3), "dup-job")
    messages = receive_all(jobs_env)
    assert len(messages) == 3
    tracer = trace.get_tracer("the-worker")
    for message in [*messages, *messages]:  # every unit delivered twice
        with tracer.start_as_current_span("invocation"):
            run_job_unit(message)
    store = JobStore(jobs_env)
    archived = store.read_archive("dup-job")
    assert archived is not None
    # a finalizer that decided to finish the job before it was archived (the watcher)
    done = Completion.from_dict(archived["completion"])
    finalize(store, done.with_(announcement=None, etag=None, finalized_by="watcher"))
    assert len(receiver.posts) == 1
    assert telemetry.added_by("app.jobs.completed") == {(("status", "succeeded"),): 1}
    assert telemetry.added_by("app.jobs.announced") == {(("state", "delivered"),): 1}
    invocations = telemetry.attributes("invocation")
    completed = [a for a in invocations if "app.job.completed" in a]
    assert [(a["app.job.id"], a["app.job.completed"]) for a in completed] == [
        ("dup-job", "succeeded")
    ]
    # the callback's POST, in the library's run-once span of the announcement (a replay to
    # the late finalizer did not POST, and is not counted)
    [post] = [s for s in telemetry.spans("once job-callback-{job_id}")
              if (s.attributes or {}).get("app.job.announced")]  # fmt: skip
    assert dict(post.attributes or {})["app.job.announced"] == "delivered"


def test_a_failed_job_is_counted_as_failed(
    jobs_env: JobSettings, receiver: CallbackReceiver, telemetry: Telemetry
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(2), "bad-job")
    record_unit(store, "bad-job", "u00000", 2, UnitState.FAILED, "bad input")
    record_unit(store, "bad-job", "u00001", 2)
    record_unit(store, "bad-job", "u00001", 2)  # a duplicate after the end
    assert telemetry.added_by("app.jobs.completed") == {(("status", "failed"),): 1}
