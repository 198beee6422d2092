"""What an 834 means to the import, rule by rule, on real public files (data/real834,
see SOURCES.md) and on small interchanges where no public file shows the case."""

from __future__ import annotations

from datetime import date

import pytest

from shared.imports.dependents import identity_digest
from shared.imports.maintenance import (
    ADD,
    CHANGED,
    REINSTATEMENT_EVENT,
    TERMINATION_EVENT,
    UNCHANGED,
    apply,
    classify,
)
from shared.imports.records import ACTIVE, CANCELLED, TERMINATED, Change, Member
from shared.imports.validation import RecordError, member_key, validate_change
from shared.imports.x12.members import FileFacts
from tests.imports.edi834 import interchange, read, real, subscriber

TODAY = date(2026, 11, 22)


def changes(data: bytes) -> list[Change]:
    found = []
    for record in read(data):
        assert record.error is None, record.error
        assert record.change is not None
        found.append(validate_change(record.change, today=TODAY))
    return found


def fold(items: list[Change]) -> tuple[dict[str, Member], list[str]]:
    """Apply changes in order as the importer does; the members and what each record did."""
    members: dict[str, Member] = {}
    outcomes = []
    for change in items:
        before = members.get(change.member_id)
        after = apply(before, change)
        outcomes.append(classify(before, after))
        members[change.member_id] = after
    return members, outcomes


def test_demographics_come_from_2100A_only_and_the_corrected_name_is_the_name() -> None:
    """Oregon MMIS 001 change: NM1*74 (corrected name) in 2100A, and 2100B NM1*70 (the
    incorrect name) with its own, old DMG. The member's birth date is 2100A's."""
    (change,) = changes(real("pyx12_834_ls_le_ls.txt"))
    assert change.maintenance == "001"
    assert change.date_of_birth == date(1983, 7, 19)  # 2100A DMG, not 2100B's 1993-06-20
    assert (change.last_name, change.first_name) == ("SUBSCRIBER LAST 1", "SUBSCRIBER FIRST 1")
    assert change.eligibility_begin == date(2012, 9, 1)  # 2000 DTP*356
    assert change.eligibility_end == date(2013, 3, 31)  # 2000 DTP*357


def test_member_ids_real_files_carry_are_accepted_and_keys_stay_table_safe() -> None:
    (change,) = changes(real("pyx12_834_ls_le_ls.txt"))
    assert change.member_id == "REF OF"  # a space, as the file has it
    assert member_key("REF OF") == "REF OF"
    assert member_key("A/B\\C#D?E%F") == "A%2FB%5CC%23D%3FE%25F"
    assert member_key("~state") == "%7Estate" and member_key("X\x01\x7f") == "X%01%7F"
    ids = ["a/b", "a%2Fb", "~x", "%7Ex", "a b", "a\tb"]
    assert len({member_key(i) for i in ids}) == len(ids)  # encoding, not folding
    for key in map(member_key, ids):
        assert not set(key) & set("/\\#?") and key.isprintable() and not key.startswith("~")


def test_a_termination_with_349_and_357_but_no_348_is_a_termination() -> None:
    data = real("pyx12_834_deident_term.txt")
    members, outcomes = fold(changes(data))
    assert outcomes == [TERMINATION_EVENT, TERMINATION_EVENT]
    member = members["M000010"]
    assert (member.status, member.status_effective) == (TERMINATED, date(2026, 3, 31))
    assert member.eligibility_end == date(2026, 3, 31)
    assert [(c.line, c.end) for c in member.coverages] == [("PPO", date(2026, 3, 31))]


def test_a_termination_ends_the_coverages_it_does_not_carry() -> None:
    enrolled = subscriber("S1", "021", coverages=(
        "HD*021**HLT*GOLD*EMP", "DTP*348*D8*20260101",
        "HD*021**DEN*D1*EMP", "DTP*348*D8*20260101",
    ))  # fmt: skip
    terminated = subscriber("S1", "024", "DTP*357*D8*20260630", coverages=())
    members, outcomes = fold(changes(interchange(enrolled + terminated)))
    assert outcomes == [ADD, TERMINATION_EVENT]
    assert [c.end for c in members["S1"].coverages] == [date(2026, 6, 30)] * 2


def test_a_termination_without_any_end_date_is_rejected() -> None:
    data = interchange(subscriber("S1", "024", coverages=()))
    (record,) = read(data)
    assert record.change is not None
    with pytest.raises(RecordError, match=r"INS03=024\) needs DTP\*357"):
        validate_change(record.change, today=TODAY)


def test_dependents_with_their_own_ref_0f_are_members() -> None:
    """A family file where each dependent's REF*0F is its own, and no 2300 loops."""
    items = changes(real("pyx12_834_deident_family.txt"))
    assert [(c.member_id, c.subscriber, c.relationship) for c in items] == [
        ("M000002", True, "18"), ("M000003", False, "01"), ("M000004", False, "19"),
    ]  # fmt: skip
    members, outcomes = fold(items)
    assert outcomes == [ADD, ADD, ADD]
    assert members["M000003"].coverages == () and members["M000003"].status == ACTIVE


def dependent(ref_0f: str, relationship: str, *extra: str, nm1: str = "NM1*IL*1*QUIXOTE*ANA"
              ) -> list[str]:  # fmt: skip
    return [f"INS*N*{relationship}*021*XN*A*E**FT", f"REF*0F*{ref_0f}", *extra, nm1,
            "DMG*D8*20100101*F"]  # fmt: skip


def test_dependents_are_identified_as_real_files_identify_them() -> None:
    family = [
        *subscriber("S1"),
        *dependent("S1", "01"),  # spouse: the subscriber's REF*0F, relationship, birth, name
        *dependent("S1", "19", "REF*23*CHILD-A"),  # REF*23
        *dependent("S1", "19", nm1="NM1*IL*1*QUIXOTE*BEA****ZZ*MBR 77"),  # NM109 (ZZ)
        *dependent("S1", "19", nm1="NM1*IL*1*QUIXOTE*CAL****34*123456789"),  # an SSN: never
    ]
    ids = [r.member_id for r in read(interchange(family))]
    spouse = identity_digest("S1", "01", date(2010, 1, 1), "ANA")
    child = identity_digest("S1", "19", date(2010, 1, 1), "CAL")
    assert ids == ["S1", f"S1-01-{spouse}", "CHILD-A", "MBR 77", f"S1-19-{child}"]
    assert "123456789" not in str(ids) and "ANA" not in str(ids) and "2010" not in str(ids)


def test_two_dependents_with_one_identity_are_rejected_not_merged() -> None:
    """Twins with one name (or one child sent twice): the same subscriber, relationship,
    birth date and first name. Nothing tells them apart: both rejected, never merged."""
    family = subscriber("S1") + dependent("S1", "19") + dependent("S1", "19")
    records = read(interchange(family))
    assert records[0].error is None
    assert all("2 dependents of one subscriber with relationship INS02=19" in (r.error or "")
               and "cannot be told apart" in (r.error or "") for r in records[1:])  # fmt: skip
    assert all(r.change is None for r in records[1:])


def test_a_member_cancelled_then_reenrolled_later_in_the_file_ends_up_enrolled() -> None:
    first = subscriber("S1", "024", "DTP*357*D8*20260331", coverages=(
        "HD*024**HLT*GOLD*EMP", "DTP*348*D8*20260101", "DTP*349*D8*20260331"))  # fmt: skip
    later = subscriber("S1", "021", "DTP*356*D8*20260501", coverages=(
        "HD*021**HLT*GOLD*EMP", "DTP*348*D8*20260501"))  # fmt: skip
    members, outcomes = fold(changes(interchange(first, later)))
    assert outcomes == [TERMINATION_EVENT, REINSTATEMENT_EVENT]
    member = members["S1"]
    assert (member.status, member.status_effective) == (ACTIVE, date(2026, 5, 1))
    assert [(c.begin, c.end) for c in member.coverages] == [(date(2026, 5, 1), None)]


def test_identical_repeats_change_nothing() -> None:
    """pyx12's example: the same 030 member in four transaction sets of one interchange."""
    data = real("pyx12_multiple_st_loops.txt")
    members, outcomes = fold(changes(data))
    assert outcomes == [ADD, UNCHANGED, UNCHANGED, UNCHANGED]
    assert members["00389999"].coverages[0].line == "AK"


def test_every_coverage_loop_is_kept_and_changed_on_its_own() -> None:
    enrolled = subscriber("S1", "021", coverages=(
        "HD*021**HLT*GOLD*FAM", "DTP*348*D8*20260101",
        "HD*021**DEN*D-PLUS*FAM", "DTP*348*D8*20260101",
        "HD*021**VIS*V1*FAM", "DTP*348*D8*20260101",
    ))  # fmt: skip
    dental_ends = subscriber("S1", "001", coverages=(
        "HD*024**DEN*D-PLUS*FAM", "DTP*349*D8*20260630"))  # fmt: skip
    plan_change = subscriber("S1", "001", coverages=(
        "HD*001**HLT*SILVER*FAM", "DTP*348*D8*20260701"))  # fmt: skip
    members, outcomes = fold(changes(interchange(enrolled + dental_ends + plan_change)))
    assert outcomes == [ADD, CHANGED, CHANGED]
    member = members["S1"]
    assert member.status == ACTIVE
    assert [(c.line, c.plan, c.begin, c.end, c.status) for c in member.coverages] == [
        ("DEN", "D-PLUS", date(2026, 1, 1), date(2026, 6, 30), TERMINATED),
        ("VIS", "V1", date(2026, 1, 1), None, ACTIVE),
        ("HLT", "SILVER", date(2026, 7, 1), None, ACTIVE),
    ]


def test_two_coverages_in_one_line_of_business_are_both_kept() -> None:
    """California DHCS style: Medicare Advantage and Medi-Cal, both HLT, in one member."""
    data = interchange(subscriber("S1", "021", coverages=(
        "HD*021**HLT*MEDICARE ADVANTAGE D-SNP", "DTP*348*D8*20240101",
        "HD*021**HLT*MEDI-CAL", "DTP*348*D8*20240101",
    )))  # fmt: skip
    members, _ = fold(changes(data))
    assert [c.plan for c in members["S1"].coverages] == ["MEDICARE ADVANTAGE D-SNP", "MEDI-CAL"]


def test_a_cancellation_is_not_a_one_day_coverage() -> None:
    """Begin = end (or end before begin, as DHCS sends it): never in effect."""
    data = interchange(subscriber("S1", "024", coverages=(
        "HD*024**HLT*GOLD*EMP", "DTP*348*D8*20260501", "DTP*349*D8*20260501",
        "HD*024**DEN*D1*EMP", "DTP*348*D8*20260501", "DTP*349*D8*20260430",
    )))  # fmt: skip
    members, outcomes = fold(changes(data))
    member = members["S1"]
    assert outcomes == [TERMINATION_EVENT]
    assert member.status == CANCELLED
    assert [c.status for c in member.coverages] == [CANCELLED, CANCELLED]


def test_rd8_ranges_in_coverage_dates() -> None:
    data = interchange(subscriber("S1", "021", coverages=(
        "HD*021**HLT*GOLD*EMP", "DTP*348*RD8*20260101-20261231",
        "HD*021**DEN*D1*EMP", "DTP*348*D8*20260101", "DTP*349*RD8*20260101-20260630",
    )))  # fmt: skip
    (change,) = changes(data)
    assert [(c.coverage.begin, c.coverage.end) for c in change.coverages] == [
        (date(2026, 1, 1), date(2026, 12, 31)), (date(2026, 1, 1), date(2026, 6, 30)),
    ]  # fmt: skip


def test_a_4010_file_reads_the_same_way() -> None:
    facts = FileFacts()
    (record,) = read(real("pyx12_834_lui_id_4010.txt"), facts)
    assert record.change is not None and record.member_id == "00389999"
    assert record.change.maintenance == "030" and record.change.date_of_birth == date(1967, 3, 30)
    assert facts.effective == date(2007, 3, 1)  # header DTP*007


def test_a_bad_birth_date_rejects_the_member_with_its_segment_and_line() -> None:
    """California DHCS sample (PACE): DMG02 is a placeholder, and REF*23 there is a
    client number with ';'-separated data, not an id: the subscriber id is REF*0F."""
    records = read(real("hccinfhir_sample_834_06.txt"))
    assert [(r.member_id, r.number, r.line) for r in records] == [
        ("randomMemberId", 8, 1), ("randomMemberId2", 41, 1),
    ]  # fmt: skip
    assert all("DMG02" in (r.error or "") and "randomDoB" not in (r.error or "")
               for r in records)  # fmt: skip


def test_a_change_does_not_reinstate_and_unstated_fields_are_kept() -> None:
    ended = subscriber("S1", "024", "DTP*357*D8*20260331", coverages=())
    address_change = ["INS*Y*18*001*XN*A*E**FT", "REF*0F*S1", "NM1*IL*1*QUIXOTE*ZELDA"]
    items = changes(interchange(subscriber("S1") + ended + address_change))
    members, outcomes = fold(items)
    assert outcomes == [ADD, TERMINATION_EVENT, UNCHANGED]
    assert members["S1"].status == TERMINATED
    assert members["S1"].date_of_birth == date(1980, 5, 15)  # no DMG in the 001: kept


def test_a_reinstatement_reopens_what_the_termination_ended() -> None:
    ended = subscriber("S1", "024", "DTP*357*D8*20260331", coverages=())
    back = ["INS*Y*18*025*XN*A*E**FT", "REF*0F*S1", "NM1*IL*1*QUIXOTE*ZELDA"]
    members, outcomes = fold(changes(interchange(subscriber("S1") + ended + back)))
    assert outcomes == [ADD, TERMINATION_EVENT, REINSTATEMENT_EVENT]
    member = members["S1"]
    assert member.status == ACTIVE and member.eligibility_end is None
    assert [(c.line, c.end) for c in member.coverages] == [("HLT", None)]


def test_hd01_002_removes_a_coverage_and_030_replaces_them_all() -> None:
    enrolled = subscriber("S1", "021", coverages=(
        "HD*021**HLT*GOLD*EMP", "DTP*348*D8*20260101",
        "HD*021**DEN*D1*EMP", "DTP*348*D8*20260101",
    ))  # fmt: skip
    removed = subscriber("S1", "001", coverages=("HD*002**DEN*D1*EMP", "DTP*348*D8*20260101"))
    audit = subscriber("S1", "030", coverages=("HD*030**VIS*V1*EMP", "DTP*348*D8*20260101"))
    items = changes(interchange(enrolled + removed))
    members, _ = fold(items)
    assert [c.line for c in members["S1"].coverages] == ["HLT"]
    members, _ = fold([*items, *changes(interchange(audit))])
    assert [c.line for c in members["S1"].coverages] == ["VIS"]
