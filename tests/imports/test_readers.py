"""The CSV and 834 readers and the field rules, on in-memory byte chunks (no storage needed)."""

from __future__ import annotations

from datetime import date

import pytest

from harness import import_samples as samples
from shared.imports.csv_reader import read_csv
from shared.imports.records import FIELDS, SourceFileError, SourceRecord
from shared.imports.text_stream import ChunkedText
from shared.imports.validation import RecordError, validate_change, validate_member
from shared.imports.x12.reader import check_envelope, read_834
from tests.imports import edi834

HEADER = ",".join(FIELDS) + "\n"
TODAY = date(2026, 11, 22)


def chunks(data: bytes, size: int = 7) -> ChunkedText:
    """Small chunks on purpose: records and multi-byte characters straddle chunk borders."""
    return ChunkedText(data[i : i + size] for i in range(0, len(data), size))


def csv_records(text: bytes) -> list[SourceRecord]:
    return list(read_csv(chunks(text)))


def test_csv_rows_keep_line_numbers_raw_text_and_quoted_newlines() -> None:
    data = (
        "\ufeff" + HEADER
        + "M1,Zoë,Ng,1980-01-02,GOLD,2026-01-01,\n"
        + "\n"
        + 'M2,"Ann\nMarie",Lee,1990-03-04,SILVER,2026-01-01,2026-12-31\r\n'
        + "M3,A,B,1970-05-06,PPO,2026-01-01,"
    ).encode()  # fmt: skip
    records = csv_records(data)
    assert [(r.number, r.member_id, r.error) for r in records] == [
        (2, "M1", None), (4, "M2", None), (6, "M3", None),
    ]  # fmt: skip
    assert records[0].fields is not None and records[0].fields["first_name"] == "Zoë"
    assert records[1].raw == 'M2,"Ann\nMarie",Lee,1990-03-04,SILVER,2026-01-01,2026-12-31\r\n'


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"member_id,first_name\n", "found 2 column"),
        (b"member_id,last_name,first_name,date_of_birth,plan,coverage_start,coverage_end\n",
         "column 2 should be 'first_name'"),
        (b"M1,Zelda,Quixote,1971-03-14,GOLD,2026-01-01,\n", "wrong header"),
        (b"member_id,first_name,last_name,date_of\xff,plan,coverage_start,coverage_end\n",
         "not valid UTF-8"),
    ],
)  # fmt: skip
def test_csv_file_level_errors_come_before_any_row(data: bytes, reason: str) -> None:
    with pytest.raises(SourceFileError, match=reason) as raised:
        csv_records(data)
    assert "Zelda" not in str(raised.value) and "1971-03-14" not in str(raised.value)


def test_csv_row_level_errors_are_records_with_a_reason() -> None:
    data = HEADER.encode() + (
        b"M1,A,B,1980-01-01,GOLD,2026-01-01\n"  # 6 columns
        b"M2,A,B,1980-01-01,GOLD,2026-01-01,,extra\n"  # 8 columns
        b"M3,Caf\xe9,B,1980-01-01,GOLD,2026-01-01,\n"  # Latin-1, not UTF-8
        b'M4,"unterminated,B,1980-01-01,GOLD,2026-01-01,\n'
    )
    errors = [(r.number, r.error) for r in csv_records(data)]
    assert errors[0] == (2, "has 6 column(s), expected 7")
    assert errors[1] == (3, "has 8 column(s), expected 7")
    assert errors[2] == (4, "not valid UTF-8 (first bad byte at column 7)")
    assert errors[3][0] == 5 and "not valid CSV" in (errors[3][1] or "")


def test_field_rules_name_the_field_not_the_value() -> None:
    good = dict(zip(FIELDS, ["M1", "Zelda", "Quixote", "1971-03-14", "GOLD", "2026-01-01",
                             "2026-12-31"], strict=True))  # fmt: skip
    assert validate_member(good, today=TODAY).member_id == "M1"
    cases = {
        "member_id": ["", "   ", "x" * 81],
        "first_name": ["", "x" * 101, "Zel\tda"],
        "date_of_birth": ["14/03/1971", "1971-02-30", "2027-01-01", "1899-12-31", ""],
        "coverage_start": ["", "2026-13-01"],
        "coverage_end": ["2025-12-31", "soon"],
    }
    for field, values in cases.items():
        for value in values:
            with pytest.raises(RecordError) as raised:
                validate_member({**good, field: value}, today=TODAY)
            assert raised.value.field == field
            if value:
                assert value not in str(raised.value)


def test_a_valid_834_passes_pyx12_and_maps_onto_a_change() -> None:
    rows = list(samples.members(4))
    data = samples.edi_bytes(rows)
    assert check_envelope(chunks(data, 64)) == []
    records = list(read_834(chunks(data, 64)))
    assert [r.error for r in records] == [None] * 4
    change = records[0].change
    expected = rows[0]
    assert change is not None and change.maintenance == "030"
    assert (change.member_id, change.first_name, change.last_name) == (
        expected.member_id, expected.first_name, expected.last_name,
    )  # fmt: skip
    assert change.date_of_birth == date.fromisoformat(expected.date_of_birth)
    (coverage,) = change.coverages
    assert (coverage.coverage.line, coverage.coverage.plan) == ("HLT", expected.plan)
    assert coverage.coverage.begin == date.fromisoformat(expected.coverage_start)
    assert coverage.coverage.end == date.fromisoformat(expected.coverage_end)
    assert records[1].location == "segment 14" and records[1].line == 14
    assert records[0].raw.startswith(f"INS*Y*18*030*XN*A*E**FT~\nREF*0F*{expected.member_id}~\n")


def test_834_member_errors_reject_one_member_and_mask_values() -> None:
    rows = list(samples.members(3))
    rows[1] = samples.SampleMember("M9", "Zelda", "Quixote", "1971-02-30", "GOLD",
                                   "2026-01-01", "")  # fmt: skip
    data = samples.edi_bytes(rows).replace(
        b"INS*Y*18*030*XN*A*E**FT~\nREF*0F*M0000002", b"INS*N*19*030*XN*A*E**FT~\nREF*0F*M0000002"
    )
    assert check_envelope(chunks(data)) == []
    records = list(read_834(chunks(data)))
    assert records[0].error is None
    assert records[1].member_id == "M9" and "DMG02" in (records[1].error or "")
    assert "19710230" not in (records[1].error or "")
    # a dependent whose REF*0F is not its subscriber's: the sender identifies it there
    assert records[2].error is None and records[2].member_id == "M0000002"


def test_an_834_termination_needs_an_end_date() -> None:
    """INS03=024 stored without an end date would reopen the member's coverage."""
    from dataclasses import replace

    base = list(samples.members(4))
    rows = [
        replace(base[0], maintenance="024", coverage_end="2026-11-30"),  # DTP*349
        replace(base[1], maintenance="024", coverage_end="", eligibility_end="2026-10-31"),
        replace(base[2], maintenance="024", coverage_end=""),  # no end date at all
        replace(base[3], maintenance="021", coverage_end=""),  # an addition: open-ended is fine
    ]
    data = samples.edi_bytes(rows)
    assert check_envelope(chunks(data, 64)) == []
    records = list(read_834(chunks(data, 64)))
    changes = [r.change for r in records]
    assert all(c is not None for c in changes) and [r.error for r in records] == [None] * 4
    ok = [validate_change(c, today=TODAY) for c in changes[:2] if c is not None]
    assert ok[0].coverages[0].coverage.end == date(2026, 11, 30)
    assert ok[1].eligibility_end == date(2026, 10, 31)
    with pytest.raises(RecordError, match="INS03=024"):
        validate_change(changes[2], today=TODAY)  # type: ignore[arg-type]
    validate_change(changes[3], today=TODAY)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b[: len(b) // 2], "missing"),  # truncated mid-file
        (lambda b: b[: b.rindex(b"IEA")], "Interchange Control Trailer"),
        (lambda b: b.replace(b"SE*", b"SE*9"), "SE count"),
        (lambda b: b.replace(b"BGN*00", b"BGN*99"), "segment 4"),
        (lambda b: b + b"GARBAGE", "after the last segment"),
    ],
)
def test_834_envelope_errors_reject_the_whole_file(mutate: object, reason: str) -> None:
    data = mutate(samples.edi_bytes(list(samples.members(3))))  # type: ignore[operator]
    problems = check_envelope(chunks(data))
    assert any(reason in p for p in problems), problems


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"", "empty"), (b"hello world", "does not start with ISA"), (b"ISA*00*", "ISA")],
)
def test_834_that_is_not_x12_is_a_file_error(data: bytes, reason: str) -> None:
    with pytest.raises(SourceFileError, match=reason):
        check_envelope(chunks(data))


def test_a_misplaced_segments_values_stay_out_of_the_envelope_problems() -> None:
    """pyx12 quotes a segment it cannot place ("Segment N3*17 MAIN ST not found"); the
    problems go to the report and the log, so only the segment's id is kept there."""
    data = edi834.interchange(["N3*17 SECRETLANE ROAD", "XX*SECRETNAME", *edi834.subscriber("M1")])
    problems = check_envelope(chunks(data))
    assert any("Segment N3 not found" in p for p in problems), problems
    assert any("Segment XX not found" in p for p in problems), problems
    assert not any("SECRET" in p for p in problems), problems
