"""Rows of an account's table or view, read as databases want to be read: keyset pages.

    SELECT key, mapped columns FROM table WHERE key > :last ORDER BY key LIMIT :page_rows

One statement per page (IMPORT_DATABASE_{A}_PAGE_ROWS rows), never OFFSET: each page starts
where the last one ended, found through the key's index, so page 2,000 costs what page 1
does. A page's rows come through a server-side cursor (`stream_results`, `yield_per`), so
memory holds at most YIELD_ROWS rows whatever the table's size. The table's name, its
columns and the key come from settings and are quoted by SQLAlchemy; the last key is a
bound parameter: nothing a row holds reaches SQL text.

What a run sees while the source changes: each page is one statement, so one consistent
read (PostgreSQL's and SQL Server's snapshot of that statement); pages are separate reads.
A row inserted with a key above the page being read is read this run; one inserted with a
key at or below it (behind the keyset), or updated after its page was read, is read the
next night; a row deleted is not terminated (a database source states members as a CSV
row does, and the CSV import terminates nobody for being absent).

Each record's `resume` is set at the last row of a full page: `{"key": <the key, typed>,
"line": <rows read so far>}`, so the importer checkpoints every page with its last key
(`importer._import_members`) and a later invocation starts the next page after it.

Values: text columns as they are (an integer id as its digits), dates as YYYY-MM-DD (a
timestamp at midnight too); NULL as empty (the member rules then say "is empty"); any
other type (a float name, a timestamp with a time, bytes) makes the row a reject naming the
field and the type, never the value. A rejected row's record holds its key only.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Column, MetaData, Table, select, type_coerce
from sqlalchemy.engine import Engine
from sqlalchemy.exc import NoSuchTableError, SQLAlchemyError
from sqlalchemy.types import NullType

from shared.imports.db_config import DatabaseSource
from shared.imports.db_engine import describe_error
from shared.imports.records import SourceFileError, SourceRecord
from shared.imports.validation import member_id_of

log = logging.getLogger("shared.imports")

#: Rows fetched from the server-side cursor at a time.
YIELD_ROWS = 1000
_DATES = frozenset({"date_of_birth", "coverage_start", "coverage_end"})


class SourceUnavailable(Exception):
    """The database could not be read (unreachable, login refused, timeout, dropped
    connection); `reason` is safe to show. `rows` counts the rows this attempt had read."""

    def __init__(self, reason: str, rows: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rows = rows


def check_columns(engine: Engine, source: DatabaseSource) -> Table:
    """The table reflected, its key and mapped columns checked: `SourceFileError` naming the
    column and its setting when one is gone (dropped or renamed since the settings were
    written), `SourceUnavailable` when the database cannot be reached."""
    metadata = MetaData()
    try:
        table = Table(source.table, metadata, schema=source.schema, autoload_with=engine)
    except NoSuchTableError:
        raise SourceFileError(
            f"table or view {source.name.partition(':')[2]!r} "
            f"(app setting {source.setting_name('TABLE')}) does not exist"
        ) from None
    except SQLAlchemyError as error:
        raise SourceUnavailable(describe_error(error, source, engine)) from None
    present = {c.name for c in table.columns}
    wanted = [(source.setting_name("KEY"), "key", source.key)]
    wanted += [(source.setting_name("COLUMNS"), field, column) for field, column in source.columns]
    for name, field, column in wanted:
        if column not in present:
            raise SourceFileError(
                f"column {column!r} ({field}, app setting {name}) is not in "
                f"{source.name.partition(':')[2]!r}: dropped or renamed? nothing was read"
            )
    key = table.c[source.key]
    if not key.primary_key and key.nullable:  # (a view's columns reflect as nullable)
        log.warning("import %s: %s: key column %r may hold NULL or repeat: rows with a NULL key "
                    "are not read, and the keyset needs it unique (a primary key is both)",
                    source.account, source.name, source.key)  # fmt: skip
    return table


def encode_key(value: Any) -> dict[str, Any]:
    """A key as the checkpoint keeps it (JSON, its type kept)."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"key of type {type(value).__name__}")
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {"uuid": str(value)}
    raise TypeError(f"key of type {type(value).__name__}")


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "int": int, "str": str, "decimal": Decimal, "datetime": datetime.fromisoformat,
    "date": date.fromisoformat, "uuid": uuid.UUID,
}  # fmt: skip


def decode_key(data: dict[str, Any]) -> Any:
    """A key from `encode_key`'s form."""
    ((kind, value),) = data.items()
    return _DECODERS[kind](value)


def _value(field: str, value: Any) -> str:
    """A column value as the member rules read it; `ValueError` (naming the type, not the
    value) for a type the field cannot hold."""
    if value is None:
        return ""
    if field in _DATES:
        if isinstance(value, datetime):
            if value.time() != datetime.min.time():
                raise ValueError(f"{field}: is a timestamp with a time of day, not a date")
            return value.date().isoformat()
        if isinstance(value, date):
            return value.isoformat()
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and field == "member_id":
        return str(value)
    raise ValueError(f"{field}: a database value of type {type(value).__name__}, "
                     f"expected {'a date' if field in _DATES else 'text'}")  # fmt: skip


def _record(source: DatabaseSource, number: int, row: Any,
            resume: dict[str, Any] | None) -> SourceRecord:  # fmt: skip
    key = row[0]
    raw = json.dumps({source.key: key if isinstance(key, int | str) else str(key)})
    fields: dict[str, str] = {}
    try:
        for (field, _), value in zip(source.columns, row[1:], strict=True):
            fields[field] = _value(field, value)
    except ValueError as error:
        member_id = member_id_of(fields) if "member_id" in fields else None
        return SourceRecord(number, "row", raw, error=str(error), member_id=member_id,
                            resume=resume, category=str(error).split(":")[0])  # fmt: skip
    fields.setdefault("coverage_end", "")
    return SourceRecord(number, "row", raw, fields=fields, member_id=member_id_of(fields),
                        resume=resume)  # fmt: skip


def read_rows(engine: Engine, source: DatabaseSource, table: Table,
              resume: dict[str, Any] | None) -> Iterator[SourceRecord]:  # fmt: skip
    """The source's rows in key order, after `resume` (None: from the first), one record
    each; `SourceUnavailable` when a page cannot be read (the rows before it were yielded)."""
    key_column: Column[Any] = table.c[source.key]
    # the values as the driver gives them (no type's result processing, which a value of
    # another type than the column's, as SQLite allows, would break on): `_value` judges them
    columns = [
        type_coerce(c, NullType()) for c in (key_column, *(table.c[n] for _, n in source.columns))
    ]
    last = decode_key(resume["key"]) if resume else None
    number = int(resume["line"]) if resume else 0
    read = 0
    while True:
        query = select(*columns).order_by(key_column).limit(source.page_rows)
        query = query.where(key_column > last if last is not None else key_column.is_not(None))
        in_page = 0
        try:
            with engine.connect() as connection:
                streamed = connection.execution_options(stream_results=True, yield_per=YIELD_ROWS)
                rows = streamed.execute(query)
                for row in rows:
                    in_page += 1
                    number += 1
                    read += 1
                    last = row[0]
                    point = None
                    if in_page == source.page_rows:
                        point = {"key": encode_key(last), "line": number}
                    yield _record(source, number, row, point)
        except SQLAlchemyError as error:
            raise SourceUnavailable(describe_error(error, source, engine), read) from None
        if in_page < source.page_rows:
            return
