"""`table_batch.submit_replace` on Azurite: what the SDK's transaction writes, and refuses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.imports.member_table import members_table
from shared.imports.table_batch import TransactionFailed, submit_replace
from tests.imports.support import ImportsEnv

ODD_KEYS = ["O'Brien", "50%off", "ü-ñ 1", "a+b=c&d", "M%23x"]  # as member_key makes them


def test_rows_land_with_their_types_and_the_etags_are_the_stored_ones(
    imports_env: ImportsEnv,
) -> None:
    table = members_table()
    table.create_table()
    when = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
    rows = [
        {"PartitionKey": "acme", "RowKey": key, "Name": f"n{i}", "Count": i, "Flag": i % 2 == 0,
         "At": when}
        for i, key in enumerate(ODD_KEYS)
    ]  # fmt: skip
    etags = submit_replace(table, [(row, None) for row in rows])
    for row, etag in zip(rows, etags, strict=True):
        stored = table.get_entity("acme", row["RowKey"])
        assert dict(stored) == row
        assert stored.metadata["etag"] == etag
    changed = {**rows[0], "Count": 99}
    assert submit_replace(table, [(changed, etags[0])])[0] != etags[0]  # If-Match held


def test_a_stale_etag_refuses_the_whole_transaction(imports_env: ImportsEnv) -> None:
    table = members_table()
    table.create_table()
    (etag,) = submit_replace(table, [({"PartitionKey": "a", "RowKey": "~state", "T": 1}, None)])
    submit_replace(table, [({"PartitionKey": "a", "RowKey": "~state", "T": 2}, etag)])
    with pytest.raises(TransactionFailed) as refused:
        submit_replace(table, [
            ({"PartitionKey": "a", "RowKey": "M1", "T": 3}, None),
            ({"PartitionKey": "a", "RowKey": "~state", "T": 3}, etag),  # the old ETag
        ])  # fmt: skip
    assert refused.value.status_code == 412
    assert refused.value.error_code in ("UpdateConditionNotSatisfied", "ConditionNotMet")
    assert [r["RowKey"] for r in table.query_entities("PartitionKey eq 'a'")] == ["~state"]
