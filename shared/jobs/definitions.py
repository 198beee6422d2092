"""Job definitions too large for a request body, submitted by reference to a blob.

    POST /api/jobs  {"job_id": "...", "callback_url": "https://...", "units_blob": "b7/units.jsonl"}

The blob lives in the container JOB_DEFINITIONS_CONTAINER ("job-definitions") of the app's
storage account; the client writes it first (with a role on that container, or a SAS the
operator gives it) and leaves it unchanged until the job is accepted. It is JSON Lines,
UTF-8: one unit per line, `{"id": "unit-1", "payload": <any JSON>}`; blank lines are skipped.
At most MAX_DEFINITION_BYTES, one line at most 1 MiB, at most JOB_MAX_UNITS lines.

Memory stays flat whatever the blob holds: it is streamed in 256 KiB ranges and parsed one
line at a time (each line counted like a request body: shared.json_body), twice. The first
pass, inside the request, validates every line and keeps only the unit ids and a SHA-256 of
the bytes (the job's fingerprint), so a bad definition is a 400 listing each bad line. The
second pass enqueues the units. Both read with If-Match on the etag the first one saw: a
blob replaced in between fails the submission (409) instead of mixing two versions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import HttpResponseError

from shared import storage
from shared.imports.blob_source import open_text
from shared.imports.text_stream import MAX_LINE, has_undecodable, original_bytes
from shared.jobs.errors import DefinitionChanged, Problem
from shared.jobs.messages import JobUnit
from shared.jobs.records import UnitSpec
from shared.models import InvalidMessage

#: The largest definition blob: 10,000 units of ~25 KiB each.
MAX_DEFINITION_BYTES = 256 * 1024 * 1024
#: Values in one line (the request body's limit per unit).
MAX_LINE_VALUES = 100_000
MAX_BLOB_NAME = 1024


class DefinitionLine(JobUnit):
    """One line of a definition blob: a `JobUnit`, bounded as a request body is."""

    max_bytes = 4 * MAX_LINE  # characters of up to 4 bytes each
    max_elements = MAX_LINE_VALUES


@dataclass(frozen=True)
class DefinitionUnits:
    """The units of a validated definition blob: iterating streams them again (If-Match)."""

    container: str
    name: str
    etag: str
    count: int
    digest: str  # SHA-256 of the blob's bytes
    connection: str = "AzureWebJobsStorage"

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[UnitSpec]:
        try:
            text = open_text(self.container, self.name, self.etag, self.connection)
            for _, line, _ in _lines(text):
                if line.strip():  # validated already: whole lines, each a unit
                    unit = DefinitionLine.parse(line)
                    yield UnitSpec(unit.id, unit.payload)
        except HttpResponseError as error:
            if error.status_code in (404, 412):
                raise DefinitionChanged(self.name) from error
            raise


def _lines(text: Any) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, whether it starts the line) of every piece of text: a line longer
    than MAX_LINE comes in pieces of MAX_LINE characters (the first one without its line
    break), so that no line is ever held whole."""
    number = 0
    continued = False
    for piece in text:
        if not continued:
            number += 1
        yield number, piece, not continued
        continued = not piece.endswith("\n")


def read_definition(
    name: object,
    max_units: int,
    problems: list[Problem],
    *,
    container: str,
    connection: str = "AzureWebJobsStorage",
    max_problems: int = 20,
) -> tuple[DefinitionUnits, list[str]] | None:
    """Validate the definition blob `name` line by line: its units (not held in memory) and
    their ids, or None with what is wrong added to `problems`."""
    where = "units_blob"
    if not isinstance(name, str) or not name or len(name) > MAX_BLOB_NAME:
        problems.append(Problem(where, f"must be a blob name of 1 to {MAX_BLOB_NAME} characters"))
        return None
    if any(part in ("", ".", "..") for part in name.split("/")) or not name.isprintable():
        problems.append(Problem(where, "must be a blob name without empty, . or .. segments"))
        return None
    blob = storage.blob_service(connection).get_blob_client(container, name)
    try:
        props = blob.get_blob_properties()
    except HttpResponseError as error:
        if error.status_code == 404:
            problems.append(Problem(where, f"no blob {name!r} in container {container!r}"))
            return None
        raise
    if props.size > MAX_DEFINITION_BYTES:
        problems.append(
            Problem(where, f"is {props.size} bytes, the limit is {MAX_DEFINITION_BYTES}")
        )
        return None
    digest = hashlib.sha256()
    ids: list[str] = []
    seen: set[str] = set()
    try:
        for number, line, starts in _lines(open_text(container, name, props.etag, connection)):
            digest.update(original_bytes(line))
            if not starts or not line.strip():
                continue  # the rest of a line refused for its length, or a blank line
            unit_id = _unit(line, f"{where}:line {number}", problems, seen)
            if unit_id is not None:
                ids.append(unit_id)
                seen.add(unit_id)
            if len(ids) > max_units:
                problems.append(Problem(where, f"has more than {max_units} units (the limit)"))
            if len(problems) >= max_problems or len(ids) > max_units:
                return None
    except HttpResponseError as error:
        if error.status_code in (404, 412):
            problems.append(Problem(where, "changed while it was read: submit it again"))
            return None
        raise
    if problems:
        return None
    units = DefinitionUnits(container, name, props.etag, len(ids), digest.hexdigest(), connection)
    return units, ids


def _unit(line: str, where: str, problems: list[Problem], seen: set[str]) -> str | None:
    if len(line) >= MAX_LINE and not line.endswith("\n"):
        problems.append(Problem(where, f"is longer than {MAX_LINE} characters"))
        return None
    if has_undecodable(line):
        problems.append(Problem(where, "is not UTF-8 text"))
        return None
    try:
        unit = DefinitionLine.parse(line)
    except InvalidMessage as error:
        problems.extend(
            Problem(f"{where}.{p.field}", p.message) if p.field else Problem(where, p.describe())
            for p in error.problems
        )
        return None
    if unit.id in seen:
        problems.append(Problem(f"{where}.id", f"duplicate unit id {unit.id!r}"))
        return None
    return unit.id
