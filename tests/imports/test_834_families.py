"""Families as carriers send them: children without an identifier of their own, identified
by their subscriber, relationship, birth date and first name (`shared/imports/dependents.py`),
on the X12 guide's published DOE family (data/real834, see SOURCES.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date

import pytest

from shared.imports.dependents import derived_member_id, identity_digest
from shared.imports.importer import run_import
from shared.imports.member_table import FencedMemberWriter, Provenance
from shared.imports.records import Member
from shared.imports.request import ImportRequest
from shared.imports.text_stream import ChunkedText
from shared.imports.x12.families import ReadLimits
from shared.imports.x12.reader import read_834
from tests.imports.edi834 import interchange, member_loops, read, real
from tests.imports.support import ImportsEnv

SUBSCRIBER_ID = "123456789"
(SUBSCRIBER,) = member_loops("linuxforhealth_enroll_employee_multiple_products.834")
(JOHN,) = member_loops("linuxforhealth_add_dependent.834")  # born 1977-08-16
(JAMES,) = member_loops("linuxforhealth_cancel_dependent.834")  # his twin, cancelled
#: A third child: JOHN's loop with another first name and sex (no public file has three).
JANE = [s.replace("*DOE*JOHN*P*", "*DOE*JANE*P*").replace("*19770816*M", "*19770816*F")
        for s in JOHN]  # fmt: skip
TWINS_BIRTH = date(1977, 8, 16)
DAY1 = ImportRequest.nightly("acme", date(2026, 11, 22))
DAY2 = ImportRequest.nightly("acme", date(2026, 11, 23))
DAY3 = ImportRequest.nightly("acme", date(2026, 11, 24))


def child_id(first_name: str, birth: date = TWINS_BIRTH, key: bytes = b"") -> str:
    digest = identity_digest(SUBSCRIBER_ID, "19", birth, first_name, key)
    return derived_member_id(SUBSCRIBER_ID, "19", digest)


def test_two_children_of_one_subscriber_without_ids_are_two_members() -> None:
    """Before: both rejected as "2 dependents of one subscriber with relationship INS02=19
    and no id of their own"; the NM109 they carry is an SSN (NM108=34), never an id."""
    records = read(interchange(SUBSCRIBER + JOHN + JAMES))
    assert [(r.member_id, r.error) for r in records] == [
        (SUBSCRIBER_ID, None), (child_id("JOHN"), None), (child_id("JAMES"), None),
    ]  # fmt: skip
    assert all(r.change is not None for r in records)
    assert "103229876" not in str([r.member_id for r in records])


def test_three_children_of_one_subscriber_without_ids_are_three_members() -> None:
    records = read(interchange(SUBSCRIBER + JOHN + JAMES + JANE))
    ids = [r.member_id for r in records]
    assert [r.error for r in records] == [None] * 4
    assert ids == [SUBSCRIBER_ID, child_id("JOHN"), child_id("JAMES"), child_id("JANE")]
    assert len(set(ids)) == 4


def test_the_identity_is_hashed_keyed_and_the_same_in_every_file() -> None:
    """The same child has the same id in tomorrow's file (and in a file without its
    subscriber's loop); no name or birth date in it; IMPORT_DEPENDENT_ID_KEY keys it."""
    family = [r.member_id for r in read(interchange(SUBSCRIBER + JOHN + JAMES))]
    alone = [r.member_id for r in read(real("linuxforhealth_add_dependent.834"))]
    assert alone == [family[1]]
    assert child_id("John") == child_id("JOHN") == child_id(" jóhn ")  # names normalised
    for text in ("JOHN", "JAMES", "1977", "0816"):
        assert text not in "".join(family)
    key = b"k" * 32
    data = interchange(SUBSCRIBER + JOHN)
    stream = ChunkedText([data])
    keyed = [r.member_id for r in read_834(stream, limits=ReadLimits(id_key=key))]
    assert keyed == [SUBSCRIBER_ID, child_id("JOHN", key=key)] and keyed[1] != family[1]


def test_a_dependent_without_a_birth_date_cannot_be_identified() -> None:
    no_birth = [s for s in JOHN if not s.startswith("DMG")]
    (record,) = read(interchange(no_birth))
    assert record.change is None
    assert record.error is not None and "has no birth date (2100A DMG02)" in record.error


def _day(imports_env: ImportsEnv, request: ImportRequest, files: dict[str, bytes]) -> dict:
    for name, data in files.items():
        imports_env.upload("acme", name, data)
    return run_import(request, token=int(request.run_date[-2:]), email=False).to_dict()


def _dependents(imports_env: ImportsEnv) -> dict[str, tuple[str, str, str]]:
    return {
        row["MemberId"]: (row["FirstName"], row["DateOfBirth"], row["Status"])
        for row in imports_env.members("acme").values()
        if not row["Subscriber"]
    }


def test_children_without_ids_are_imported_and_matched_again_by_the_next_days_file(
    imports_env: ImportsEnv, no_health_data_in: Callable[[list[str]], None],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="shared.imports")
    day1 = _day(imports_env, DAY1, {"family.834": interchange(SUBSCRIBER + JOHN + JAMES + JANE)})
    assert day1["totals"]["rejected"] == 0 and day1["totals"]["records"] == 4
    first = _dependents(imports_env)
    assert sorted(first) == sorted([child_id("JOHN"), child_id("JAMES"), child_id("JANE")])
    assert first[child_id("JAMES")][2] == "terminated"  # INS03=024, DTP*357
    # the next day: the same family again, and the published files for two of the children
    day2 = _day(imports_env, DAY2, {
        "family.834": interchange(SUBSCRIBER + JOHN + JAMES + JANE),
        "john.834": real("linuxforhealth_add_dependent.834"),
        "james.834": real("linuxforhealth_cancel_dependent.834"),
    })  # fmt: skip
    totals = day2["totals"]
    assert (totals["records"], totals["added"], totals["rejected"]) == (6, 0, 0)
    assert totals["unchanged"] == 6  # every child found again, as it was
    assert _dependents(imports_env) == first
    assert len(imports_env.members("acme")) == 4
    no_health_data_in(["JOHN", "JAMES", "JANE", "19770816", "1977-08-16"])


def correction(first: str, birth: str, before_first: str, before_birth: str) -> list[str]:
    """A dependent's 001 change correcting its name and birth date, laid out as the guide's
    example corrects the subscriber's (linuxforhealth_change_subscriber_information.834)."""
    return [
        "INS*N*19*001*25*A***FT", f"REF*0F*{SUBSCRIBER_ID}", "REF*1L*123456001",
        f"NM1*74*1*DOE*{first}*P***34*103229876", f"DMG*D8*{birth}*M",
        f"NM1*70*1*DOE*{before_first}*P", f"DMG*D8*{before_birth}*M",
    ]  # fmt: skip


def test_a_2100b_correction_does_not_make_a_second_member(imports_env: ImportsEnv) -> None:
    """Day 1 the child as published; day 2 a correction of its first name and birth date
    (2100B holds the values before it); day 3 a file with only the corrected values: one
    member throughout, under its first id, holding the corrected values."""
    _day(imports_env, DAY1, {"john.834": real("linuxforhealth_add_dependent.834")})
    ((member_id, before),) = _dependents(imports_env).items()
    assert member_id == child_id("JOHN")
    fixed = correction("JONATHAN", "19770818", "JOHN", "19770816")
    day2 = _day(imports_env, DAY2, {"fix.834": interchange(fixed)})
    assert (day2["totals"]["changed"], day2["totals"]["added"]) == (1, 0)
    assert _dependents(imports_env) == {member_id: ("JONATHAN", "1977-08-18", "active")}
    later = [s.replace("*JOHN*", "*JONATHAN*").replace("19770816", "19770818") for s in JOHN]
    day3 = _day(imports_env, DAY3, {"later.834": interchange(later)})
    assert (day3["totals"]["added"], day3["totals"]["rejected"]) == (0, 0)
    assert list(_dependents(imports_env)) == [member_id]
    assert before == ("JOHN", "1977-08-16", "active")


def test_a_child_stored_under_the_older_fallback_id_is_found_again(
    imports_env: ImportsEnv,
) -> None:
    """An earlier version stored a sole child as "{REF*0F}-{INS02}": it is the same child."""
    writer = FencedMemberWriter("acme", 1, "old")
    writer.open()
    old = Member(f"{SUBSCRIBER_ID}-19", "JOHN", "DOE", TWINS_BIRTH, subscriber=False,
                 relationship="19", subscriber_id=SUBSCRIBER_ID)  # fmt: skip
    writer.add(old, Provenance("old", "old.834", "segment 8"))
    writer.flush()
    day1 = _day(imports_env, DAY1, {"john.834": real("linuxforhealth_add_dependent.834")})
    assert day1["totals"]["added"] == 0 and day1["totals"]["rejected"] == 0
    assert list(_dependents(imports_env)) == [f"{SUBSCRIBER_ID}-19"]
