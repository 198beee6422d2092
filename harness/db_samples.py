"""Sample member tables for an account's database source (demo, tests, benchmark).

The table's columns are named as a provider's eligibility database might name them, not
as the member fields are: the settings map one to the other (`settings_for`).

    patients(id integer primary key, patient_no text, given_name text, family_name text,
             birth_date date, plan_code text, cover_from date, cover_to date)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import date
from itertools import islice
from typing import Any

from sqlalchemy import Column, Date, Integer, MetaData, Table, Text, create_engine, insert
from sqlalchemy.engine import Engine

from harness.import_samples import SampleMember

TABLE = "patients"
KEY = "id"
#: member field -> column (IMPORT_DATABASE_{A}_COLUMNS)
COLUMNS = {
    "member_id": "patient_no",
    "first_name": "given_name",
    "last_name": "family_name",
    "date_of_birth": "birth_date",
    "plan": "plan_code",
    "coverage_start": "cover_from",
    "coverage_end": "cover_to",
}
BATCH = 5000


def table_of(metadata: MetaData, name: str = TABLE, *, typed: bool = True) -> Table:
    """The sample table; `typed=False` declares the date columns as text (so a test can put
    junk in them, as a provider's database sometimes does)."""
    day: Any = Date if typed else Text
    return Table(
        name, metadata,
        Column(KEY, Integer, primary_key=True, autoincrement=False),
        Column("patient_no", Text), Column("given_name", Text), Column("family_name", Text),
        Column("birth_date", day), Column("plan_code", Text), Column("cover_from", day),
        Column("cover_to", day),
    )  # fmt: skip


def row_of(key: int, member: SampleMember, *, typed: bool = True) -> dict[str, Any]:
    def day(text: str) -> Any:
        if not text:
            return None
        if not typed:
            return text
        try:
            return date.fromisoformat(text)
        except ValueError:
            return None  # a typed column cannot hold junk: NULL stands for it

    return {
        KEY: key, "patient_no": member.member_id, "given_name": member.first_name,
        "family_name": member.last_name, "birth_date": day(member.date_of_birth),
        "plan_code": member.plan, "cover_from": day(member.coverage_start),
        "cover_to": day(member.coverage_end),
    }  # fmt: skip


def create_members_table(
    url: str, members: Iterable[SampleMember], *, name: str = TABLE, typed: bool = True,
    first_key: int = 1,
) -> int:  # fmt: skip
    """Create table `name` at `url` (dropped first if it exists) holding `members`, keys from
    `first_key` on; returns the rows written. PostgreSQL is filled by COPY."""
    engine = create_engine(url)
    try:
        metadata = MetaData()
        table = table_of(metadata, name, typed=typed)
        metadata.drop_all(engine, tables=[table])
        metadata.create_all(engine, tables=[table])
        return insert_members(engine, table, members, first_key=first_key, typed=typed)
    finally:
        engine.dispose()


def insert_members(engine: Engine, table: Table, members: Iterable[SampleMember], *,
                   first_key: int = 1, typed: bool = True) -> int:  # fmt: skip
    rows = (row_of(first_key + i, m, typed=typed) for i, m in enumerate(members))
    written = 0
    if engine.dialect.name == "postgresql":
        names = [c.name for c in table.columns]
        with engine.begin() as connection:
            raw: Any = connection.connection.dbapi_connection
            with (
                raw.cursor() as cursor,
                cursor.copy(f'COPY "{table.name}" ({", ".join(names)}) FROM STDIN') as copy,
            ):
                for row in rows:
                    copy.write_row([row[n] for n in names])
                    written += 1
        return written
    with engine.begin() as connection:
        for batch in _batches(rows):
            connection.execute(insert(table), batch)
            written += len(batch)
    return written


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    while batch := list(islice(rows, BATCH)):
        yield batch


def settings_for(account: str, url: str, *, table: str = TABLE, **extra: str) -> dict[str, str]:
    """The app settings of `account`'s database source (IMPORT_DATABASE_ACCOUNTS aside);
    `extra`: more of them by suffix (PAGE_ROWS="500")."""
    prefix = f"IMPORT_DATABASE_{account.upper().replace('-', '_')}_"
    values = {
        "URL": url,
        "TABLE": table,
        "KEY": KEY,
        "COLUMNS": ",".join(f"{f}={c}" for f, c in COLUMNS.items()),
        **extra,
    }
    return {prefix + suffix: value for suffix, value in values.items()}
