"""Generated input for every parser of outside data, with section 1's rule as the oracle.

Each parser may answer only in its documented way: a value, or its own error (a rejected
record, a rejected file, `InvalidNotification`, ...). Anything else (a `RecursionError`, a
`UnicodeEncodeError`, an `IndexError` from deep inside pyx12) would make the host retry a
message five times, or stop a whole import. Inputs that once failed are pinned with
`@example`. `--long` runs many more examples (the `long` profile in tests/conftest.py).
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest
from blobsingleton.config import blob_name
from blobsingleton.errors import InvalidKey
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness import import_samples as samples
from shared.imports.csv_reader import read_csv
from shared.imports.records import FIELDS, SourceFileError
from shared.imports.request import ImportRequest, InvalidImportRequest
from shared.imports.text_stream import ChunkedText, original_bytes
from shared.imports.validation import RecordError, validate_member
from shared.imports.x12 import speedups
from shared.imports.x12.reader import check_envelope, read_834
from shared.jobs.errors import InvalidJob, InvalidUnitMessage
from shared.jobs.messages import UnitMessage
from shared.jobs.request import JobRequest
from shared.notifications import InvalidNotification, Notification

TODAY = date(2026, 11, 22)


@pytest.fixture(scope="module", autouse=True)
def _pyx12_speedups() -> None:
    """The 834 examples read as an import reads: with the speed-ups the importer installs."""
    speedups.install()


HEADER = ",".join(FIELDS) + "\n"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def chunks(data: bytes, size: int) -> ChunkedText:
    return ChunkedText(data[i : i + size] for i in range(0, len(data), size))


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_records(stream: Any, reader: Any) -> None:
    """Records or `SourceFileError`; every record valid, or rejected with its reason."""
    try:
        for record in reader(stream):
            if record.error is not None:
                # Kept as read (undecodable bytes escaped), for the rejected file's copy.
                assert original_bytes(record.raw) is not None
                continue
            assert encodable(record.raw)
            try:
                member = validate_member(record.fields or {}, today=TODAY)
            except RecordError as error:
                assert error.field
                continue
            blob_name("members/", member.member_id)  # a valid member's id is a valid key
    except SourceFileError as error:
        assert str(error)


@given(st.binary(max_size=2000), st.integers(min_value=1, max_value=64))
@example(b"\xed\xa0\x80", 1)  # an encoded surrogate: not UTF-8
@example(HEADER.encode() + b"M1,\x00,B,1970-01-01,P,2026-01-01,\n", 3)
def test_csv_reader_on_any_bytes(data: bytes, size: int) -> None:
    check_records(chunks(HEADER.encode() + data, size), read_csv)


@given(st.lists(st.lists(st.text(max_size=30), min_size=0, max_size=9), max_size=20))
def test_csv_reader_on_any_rows(rows: list[list[str]]) -> None:
    text = HEADER + "".join(",".join(row) + "\n" for row in rows)
    check_records(chunks(text.encode("utf-8", "surrogatepass"), 16), read_csv)


VALID_834 = samples.edi_bytes(list(samples.members(3)))
#: The 834 reader runs pyx12 on each example (about 0.1 s): a quarter of the profile's examples
#: (25 by default, 750 with --long) keeps these two from dominating `make test-fast`.
QUARTER = settings(max_examples=max(settings().max_examples // 4, 10))


@given(st.integers(min_value=0, max_value=len(VALID_834) - 1), st.binary(min_size=1, max_size=8))
@example(400, b"\xd4q\t\xb1-N")  # pyx12 raised IndexError from _parse_segment
@example(107, b"1\xfc")
@QUARTER
def test_834_reader_on_a_valid_file_with_bytes_replaced(at: int, junk: bytes) -> None:
    data = VALID_834[:at] + junk + VALID_834[at + len(junk) :]
    try:
        problems = check_envelope(chunks(data, 64))
    except SourceFileError:
        return
    if not problems:
        check_records(chunks(data, 64), read_834)


@given(st.integers(min_value=0, max_value=len(VALID_834)), st.integers(min_value=0, max_value=40))
@QUARTER
def test_834_reader_on_a_truncated_or_cut_file(at: int, cut: int) -> None:
    data = VALID_834[:at] + VALID_834[at + cut :]
    try:
        problems = check_envelope(chunks(data, 64))
    except SourceFileError:
        return
    if not problems:
        check_records(chunks(data, 64), read_834)


def body_of(value: Any) -> bytes:
    return json.dumps(value).encode()


VALID_NOTIFICATION = {
    "event_id": "e",
    "type": "t",
    "to": "a@example.com",
    "subject": "s",
    "text": "x",
}
VALID_UNIT = {"job_id": "j", "unit_id": "u", "total": 1, "payload": None}
VALID_IMPORT = {"account": "acme", "run_date": "2026-11-22", "run_id": "2026-11-22"}


def field_replaced(valid: dict[str, Any]) -> st.SearchStrategy[bytes]:
    return st.tuples(st.sampled_from(sorted(valid)), json_values).map(
        lambda pair: body_of({**valid, pair[0]: pair[1]})
    )


def any_body(valid: dict[str, Any]) -> st.SearchStrategy[bytes]:
    return st.binary(max_size=300) | json_values.map(body_of) | field_replaced(valid)


@given(any_body(VALID_NOTIFICATION))
@example(b'{"event_id": "\\ud800", "type": "t", "to": "a@example.com", "subject": "s"}')
def test_notification_parser(body: bytes) -> None:
    try:
        notification = Notification.parse(body)
    except InvalidNotification as error:
        assert error.reason
        return
    blob_name("email-", notification.event_id)
    assert encodable(notification.to_json())


@given(any_body(VALID_UNIT))
def test_unit_message_parser(body: bytes) -> None:
    try:
        unit = UnitMessage.parse(body)
    except InvalidUnitMessage:
        return
    blob_name("jobs/", unit.job_id)
    blob_name("jobs/", unit.unit_id)


@given(any_body(VALID_IMPORT))
def test_import_request_parser(body: bytes) -> None:
    try:
        request = ImportRequest.parse(body)
    except InvalidImportRequest:
        return
    blob_name("import-", request.account)


def no_dns(host: str, port: int, seconds: float) -> list[str]:
    return ["93.184.216.34"]  # a public address: the URL check passes without a lookup


@given(any_body({"units": [{"id": "u1"}], "callback_url": "https://cb.example/done"}))
def test_job_request_parser(body: bytes) -> None:
    try:
        request = JobRequest.parse(body, max_units=50, resolver=no_dns)
    except InvalidJob as error:
        assert error.problems
        return
    for unit_id in [request.job_id, *request.unit_ids]:
        try:
            blob_name("jobs/", unit_id)
        except InvalidKey:  # pragma: no cover - the oracle failing
            raise AssertionError(f"accepted an id that is not a valid key: {unit_id!r}") from None
