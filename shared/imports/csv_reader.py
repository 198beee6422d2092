"""CSV member files: the header is checked before any row is used; each row is one record.

Documented format (UTF-8, optional BOM, comma-separated, RFC 4180 quoting):

    member_id,first_name,last_name,date_of_birth,plan,coverage_start,coverage_end

Dates are YYYY-MM-DD; coverage_end may be empty. The header must name exactly these columns
in this order (case and surrounding spaces ignored). Blank lines are skipped. A row that
cannot be split (bad quoting, NUL, wrong column count, bytes that are not UTF-8) is yielded
with its `error` set, so it lands in the rejected file instead of stopping the file.

Every record carries where to resume after it (`SourceRecord.resume`): the byte offset of
the next line and the lines read so far. `read_csv(lines, resume=...)` given the text
from that offset (a range read) carries on there: the header, already checked, is not
read again, and line numbers continue.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from typing import Any

from shared.imports.records import FIELDS, SourceFileError, SourceRecord
from shared.imports.text_stream import byte_length, first_undecodable, has_undecodable
from shared.imports.validation import member_id_of


class _LineCapture:
    """Feeds lines to `csv.reader` and remembers them, so a record keeps its raw text."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self._taken: list[str] = []

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self._taken.append(line)
        return line

    def take(self) -> str:
        raw, self._taken = "".join(self._taken), []
        return raw


def _check_header(header: list[str], raw: str) -> None:
    if has_undecodable(raw):
        raise SourceFileError("wrong header: the header line is not valid UTF-8")
    names = [name.strip().lower() for name in header]
    if names == list(FIELDS):
        return
    expected = ",".join(FIELDS)
    if len(names) != len(FIELDS):
        found = f"found {len(names)} column(s)"
    else:
        column = next(i for i, (a, b) in enumerate(zip(names, FIELDS, strict=True)) if a != b)
        found = f"column {column + 1} should be {FIELDS[column]!r}"
    # The header's own text is not quoted: a file without a header starts with a member.
    raise SourceFileError(f"wrong header: expected {expected}; {found}")


def read_csv(lines: Iterable[str], resume: dict[str, Any] | None = None) -> Iterator[SourceRecord]:
    """Records of a member CSV; raises `SourceFileError` before the first row if unusable.

    `resume`: a record's `resume` point; `lines` then start at its byte offset."""
    capture = _LineCapture(lines)
    reader = csv.reader(capture, strict=True)
    if resume is None:
        try:
            header = next(reader)
        except StopIteration:
            raise SourceFileError("empty file: no header line") from None
        except csv.Error as error:
            raise SourceFileError(f"wrong header: not valid CSV ({error})") from None
        raw = capture.take()
        _check_header(header, raw)
        offset, base = int(getattr(lines, "bom", 0)) + byte_length(raw), 0
    else:
        offset, base = int(resume["offset"]), int(resume["line"])
    while True:
        start = base + reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raw = capture.take()
            offset += byte_length(raw)
            yield SourceRecord(start, "line", raw, error=f"not valid CSV: {error}",
                               resume=_at(offset, base + reader.line_num))  # fmt: skip
            continue
        raw = capture.take()
        offset += byte_length(raw)
        here = _at(offset, base + reader.line_num)
        if not row:
            continue  # blank line
        if has_undecodable(raw):
            column = first_undecodable(raw)
            reason = f"not valid UTF-8 (first bad byte at column {column})"
            yield SourceRecord(start, "line", raw, error=reason, resume=here)
            continue
        if len(row) != len(FIELDS):
            reason = f"has {len(row)} column(s), expected {len(FIELDS)}"
            yield SourceRecord(start, "line", raw, error=reason, resume=here)
            continue
        fields = dict(zip(FIELDS, row, strict=True))
        yield SourceRecord(start, "line", raw, fields=fields, member_id=member_id_of(fields),
                           resume=here)  # fmt: skip


def _at(offset: int, line: int) -> dict[str, Any]:
    return {"offset": offset, "line": line}
