"""Blob Storage's answers are read in one module, `_storage_errors` (issue 47): its table is
the only place a library module names a storage error code, and the translations the lease,
the records and the waiting line use are its own."""

from __future__ import annotations

import re
from pathlib import Path

import blobsingleton
import pytest
from azure.core.exceptions import HttpResponseError
from blobsingleton import _storage_errors as storage_errors
from blobsingleton.errors import LeaseLost, RecordConflict

SOURCE = Path(blobsingleton.__file__).resolve().parent


def test_no_module_but_the_table_reads_a_storage_error_code() -> None:
    # "LeaseLost" is also the library's exception; the in-memory backends of `testing` give
    # the reasons storage's answers would (`RecordConflict("ConditionNotMet")`).
    codes = set(storage_errors.MEANINGS) - {"LeaseLost"}
    naming = re.compile(r"error_code\(|" + "|".join(rf'"{re.escape(code)}"' for code in codes))
    found = {
        path.name
        for path in SOURCE.rglob("*.py")
        if path.name not in {"_storage_errors.py", "testing.py"}
        and naming.search(path.read_text(encoding="utf-8"))
    }
    assert not found, f"storage error codes read outside _storage_errors: {sorted(found)}"


def answer(status: int, code: str) -> HttpResponseError:
    error = HttpResponseError(message=f"{status} {code}")
    error.status_code = status
    error.error_code = code  # type: ignore[attr-defined]  # as the SDK sets it
    return error


@pytest.mark.parametrize(
    ("status", "code", "raised"),
    [
        (409, "LeaseAlreadyPresent", storage_errors.LockBusy),
        (404, "BlobNotFound", storage_errors.LockMissing),
        (404, "ContainerNotFound", storage_errors.LockMissing),
        (409, "LeaseIdMismatchWithLeaseOperation", LeaseLost),
        (412, "", LeaseLost),  # any 412 of an operation under our lease: not ours any more
    ],
)
def test_a_lease_reads_each_answer_from_the_table(
    status: int, code: str, raised: type[Exception]
) -> None:
    with pytest.raises(raised), storage_errors.lease_errors("renew", "k", 3):
        raise answer(status, code)


def test_an_acquire_that_meets_an_unknown_conflict_keeps_the_answer() -> None:
    with pytest.raises(HttpResponseError), storage_errors.lease_errors("acquire", "k"):
        raise answer(409, "SomethingNew")


@pytest.mark.parametrize(
    ("status", "code"),
    [(409, "BlobAlreadyExists"), (412, "ConditionNotMet"), (404, "BlobNotFound"), (404, "")],
)
def test_a_record_reads_a_lost_race_from_the_table(status: int, code: str) -> None:
    with pytest.raises(RecordConflict), storage_errors.record_errors("create"):
        raise answer(status, code)


class Container:
    def __init__(self) -> None:
        self.created = 0

    def create_container(self, **_: object) -> None:
        self.created += 1


class Blob:
    def __init__(self, code: str = "") -> None:
        self.created, self.code = 0, code

    def create_page_blob(self, size: int, **_: object) -> None:
        self.created += 1
        if self.code:
            raise answer(409, self.code)


def test_create_if_missing_makes_the_container_and_blob_once_and_calls_again() -> None:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise answer(404, "ContainerNotFound")
        return "done"

    container, blob = Container(), Blob("BlobAlreadyExists")  # another instance made it
    assert storage_errors.created_if_missing(call, container, blob) == "done"
    assert (len(calls), container.created, blob.created) == (2, 1, 1)


def test_create_if_missing_leaves_every_other_answer_to_the_caller() -> None:
    def call() -> None:
        raise answer(409, "LeaseAlreadyPresent")

    with pytest.raises(HttpResponseError):
        storage_errors.created_if_missing(call, Container(), Blob())
