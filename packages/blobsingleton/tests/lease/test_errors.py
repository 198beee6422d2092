"""Every error the library raises: one root, the builtin it behaves like, and a pickle round trip
(so it crosses a process pool, or multiprocessing, with its data)."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
from datetime import UTC, datetime

import blobsingleton
import pytest
from blobsingleton import errors, ops

SAMPLES: list[BaseException] = [
    errors.SettingMissing("AzureWebJobsStorage", "neither a connection string nor identity"),
    errors.InvalidKey("../x", "a '..' segment"),
    errors.KeyTemplateError("email-{event_id}", "event_id", "not found"),
    errors.StorageUnavailable("acquire", "connection refused"),
    errors.InvalidSchedule("0 0 2 * * L", "'L' is not supported", "nightly"),
    errors.NoOccurrence("0 0 0 30 Feb *"),
    errors.OccurrenceRefused(
        "nightly", datetime(2026, 11, 20, 2, tzinfo=UTC), "outside the catch-up window"
    ),
    errors.StorageAccountError("AzureWebJobsStorage", "acme", "cannot be used"),
    errors.InvalidConnectionString("AzureWebJobsStorage", "unknown", "blank or malformed"),
    errors.CredentialsRefused("OrdersStorage", "acme", "the account refused the credentials"),
    errors.LeaseError("lease 'k' could not be created"),
    errors.LeaseTimeout("import-acme", 12.5),
    errors.LeaseLost("import-acme", 7, "renewal refused"),
    errors.LeaseNotHeld("lease 'k' is not held"),
    errors.OnceError("run-once failed"),
    errors.AlreadyInProgress("email-1", 1700000000.0),
    errors.PayloadMismatch("email-1", ("subject", "to")),
    errors.ResultNotStorable("email-1", "deliver", "Widget"),
    errors.RecordConflict("ConditionNotMet"),
    errors.RunLost("email-1", "the record was taken over by another delivery"),
    errors.BatchFailed("ingest", 3, ("ingest-7", None), (ValueError("bad reading"), KeyError("x"))),
    errors.OutsideGuardedCall("current_run()", "@once"),
    ops.OpsError("the operation cannot be done"),
    ops.NotFound("no lock with key 'k'"),
    ops.NotHeld("lock 'k' is not held (available): nothing to break"),
    ops.InvalidRequest("a reason is required"),
]


def every_error_class() -> set[type]:
    """Every public error class, whichever modules the test run happened to import (all public
    modules are imported here, so the answer does not depend on test order)."""
    for module in pkgutil.iter_modules(blobsingleton.__path__):
        importlib.import_module(f"blobsingleton.{module.name}")
    found, todo = set(), [errors.BlobSingletonError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    # Private modules' errors (a busy lock blob, a missing one) never leave the library.
    return {c for c in found if not c.__module__.rsplit(".", 1)[-1].startswith("_")}


def test_every_error_class_has_a_sample_here() -> None:
    assert every_error_class() <= {type(e) for e in SAMPLES} | {errors.BlobSingletonError}


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_survives_pickling_with_its_data(error: BaseException) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert _comparable(vars(copy)) == _comparable(vars(error))
    assert isinstance(copy, blobsingleton.BlobSingletonError)


def _comparable(value: object) -> object:
    """An error's data with the exceptions it holds (BatchFailed.errors) as type and args,
    since exceptions compare by identity."""
    if isinstance(value, BaseException):
        return (type(value), value.args)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_comparable(v) for v in value)
    return value


def test_errors_subclass_the_builtin_they_behave_like() -> None:
    assert issubclass(errors.LeaseTimeout, TimeoutError)
    assert issubclass(errors.AlreadyInProgress, TimeoutError)
    assert issubclass(errors.InvalidKey, ValueError)
    assert issubclass(errors.PayloadMismatch, ValueError)
    assert issubclass(errors.SettingMissing, LookupError)
    assert issubclass(errors.KeyTemplateError, LookupError)
    assert issubclass(ops.NotFound, LookupError)
    assert issubclass(ops.InvalidRequest, ValueError)
