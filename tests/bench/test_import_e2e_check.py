"""The end-to-end import check reads the table itself, range by range (bench/import_e2e.py);
the 834 profile (bench/import_profile.py) runs."""

from __future__ import annotations

import uuid

import pytest
from azure.data.tables import TableServiceClient

from bench import import_e2e
from harness import import_samples as samples


def test_the_range_reads_find_every_row_once_including_rows_no_one_expected(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(import_e2e, "RANGE_ROWS", 4)  # many ranges from a few rows
    table = TableServiceClient.from_connection_string(storage_env).create_table(
        f"Check{uuid.uuid4().hex[:8]}"
    )
    expected = list(samples.members(23))
    rows = [{"RowKey": m.member_id, "MemberId": m.member_id, "Plan": m.plan} for m in expected]
    rows += [{"RowKey": "ZZ-not-in-the-file", "MemberId": "ZZ"},  # after the last bound
             {"RowKey": "é-non-ascii", "MemberId": "é"},  # sorts after every "~" row
             {"RowKey": "~state", "Rows": 1}]  # fmt: skip
    prefix = "~event~run1~file~0123456789abcdef~"
    # sparse record numbers (an 834's), one member added twice, one event of another kind
    numbers = [7 + 13 * i for i in range(23)]
    rows += [{"RowKey": f"{prefix}{n:010d}", "MemberId": m.member_id, "Event": "add"}
             for n, m in zip(numbers, expected, strict=True)]  # fmt: skip
    rows += [{"RowKey": f"{prefix}{10**9 + 5:010d}", "MemberId": expected[3].member_id,
              "Event": "add"},
             {"RowKey": f"{prefix}0000000400", "MemberId": expected[4].member_id,
              "Event": "change"},
             {"RowKey": "~event~run0~older~0000000001", "MemberId": "ZZ",
              "Event": "add"}]  # fmt: skip
    for row in rows:
        table.create_entity({"PartitionKey": "acct", **row})
    table.create_entity({"PartitionKey": "other", "RowKey": "M0000001", "MemberId": "x"})

    members, adds, stats = import_e2e.read_rows(table, "acct", iter(expected), threads=3)

    assert set(members) == {m.member_id for m in expected} | {"ZZ-not-in-the-file",
                                                              "é-non-ascii"}  # fmt: skip
    assert adds == {**{m.member_id: 1 for m in expected}, expected[3].member_id: 2, "ZZ": 1}
    assert stats["member_range_queries"] == 23 // 4 + 2
    assert stats["event_range_queries"] > 3


def test_the_834_profile_imports_every_member(
    bench_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import import_profile

    monkeypatch.setenv("LEASE_CONTAINER", "locks")  # put back afterwards; main sets it
    monkeypatch.setattr("sys.argv", ["import_profile", "30"])
    import_profile.main()
    assert "members=30 imported=30 invocations=1" in capsys.readouterr().out
