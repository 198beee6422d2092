"""The operator's side: list locks and run-once records, break a lock, reset a record.

    python -m blobsingleton.ops locks [--prefix P] [--json]
    python -m blobsingleton.ops runs [--prefix P] [--state in_progress|completed|expired]
    python -m blobsingleton.ops break KEY [--scope S] --reason TEXT
    python -m blobsingleton.ops reset KEY [--scope S] --reason TEXT

Every call works on `storage` (default: the app's, `from_settings`) in one `namespace`
(default: app setting BLOBSINGLETON_NAMESPACE, else the Functions host id), named in its
output; another app's keys on a shared account are never touched. `scope` is null for the
app's keys, else the function whose own key it is, as listings show it. A break or reset needs
a `reason`; it is kept with `by` (who), the time and what was there before in an audit blob.
"""

from __future__ import annotations

import argparse
import getpass
import json
import re
import socket
import sys
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from azure.core.exceptions import HttpResponseError

from blobsingleton import _connection
from blobsingleton._blob_lease import WaitingLine
from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton._keys import blob_name, encode_key, validate_key
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._keys import prefix as scoped_prefix
from blobsingleton._lease import MAX_PERIOD, SLOT_MARK, slot_name
from blobsingleton._owner import Owner
from blobsingleton._records import Record, Status
from blobsingleton._storage_errors import created_if_missing, error_code, unavailable_as
from blobsingleton.errors import (
    InvalidKey,
    InvalidRequest,
    NotFound,
    NotHeld,
    OpsError,
    RecordConflict,
)

AUDIT_CONTAINER = ("OPS_AUDIT_CONTAINER", "ops-audit")
#: A function's scope (`_keys.function_scope`).
_SCOPE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,299}")
MAX_PAGE = 200
MAX_REASON = 500
STATES = ("in_progress", "completed", "expired")


@dataclass(frozen=True)
class Page:
    """One page of a listing; pass `next` back as `marker` for the next one (None: the end)."""

    items: list[dict[str, Any]]
    next: str | None
    namespace: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "items": self.items, "next": self.next}


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


def validate_reason(reason: object) -> str:
    """A break or reset needs a reason a person wrote: non-empty, printable, not too long."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest("a reason is required")
    if len(reason) > MAX_REASON:
        raise InvalidRequest(f"the reason is {len(reason)} characters long, the limit is 500")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in reason):
        raise InvalidRequest("the reason contains control characters")
    return reason.strip()


def validate_prefix(prefix: object) -> str:
    """A key prefix to filter by ("" for all); checked like a key, so it cannot escape."""
    if prefix in (None, ""):
        return ""
    try:
        return validate_key(prefix)
    except InvalidKey as error:
        raise InvalidRequest(f"invalid prefix: {error}") from error


def validate_limit(limit: object, default: int = 50) -> int:
    """A page size from 1 to 200."""
    if limit in (None, ""):
        return default
    try:
        value = int(str(limit))
    except ValueError as error:
        raise InvalidRequest(f"limit must be a whole number, not {limit!r}") from error
    if not 1 <= value <= MAX_PAGE:
        raise InvalidRequest(f"limit must be 1 to {MAX_PAGE}, not {value}")
    return value


def _listing(
    container: Any, namespace: str, prefix: str, limit: int, marker: str | None, **kw: Any
) -> tuple[list[tuple[str | None, str, Any]], str | None]:
    """One page of `namespace` as (scope, key, blob), filtered by `prefix` after listing."""
    pages = container.list_blobs(
        name_starts_with=f"{namespace}/", results_per_page=limit, **kw
    ).by_page(continuation_token=marker or None)
    try:
        with unavailable_as("list"):
            first = next(pages, None)
            page = [] if first is None else list(first)
    except HttpResponseError as error:
        if error_code(error) == "ContainerNotFound":
            return [], None
        raise
    if first is None:
        return [], None
    found = [(*named, blob) for blob in page if (named := _key_of(blob.name, namespace))]
    return [f for f in found if f[1].startswith(prefix)], pages.continuation_token or None


def _key_of(name: str, namespace: str) -> tuple[str | None, str] | None:
    """(scope, key) of a blob name in `namespace` (a `LeaseSemaphore`'s slot names its key);
    None for a line entry or a ticket blob."""
    rest = name.removeprefix(f"{namespace}/")
    segment, _, encoded = rest.rpartition("/")
    encoded, mark, slot = encoded.partition(SLOT_MARK)
    if mark and not slot.isdigit():
        return None
    scope = segment.removeprefix("@") if segment.startswith("@") else None
    if rest == name or (segment and (scope is None or not _SCOPE.fullmatch(scope))):
        return None
    key = unquote(encoded)
    return (scope, key) if encode_key(key) == encoded else None


def _prefix(namespace: str, scope: str | None) -> str:
    if scope and not _SCOPE.fullmatch(scope):
        raise InvalidRequest(f"invalid scope {scope!r}: a function's scope, as listings show it")
    return scoped_prefix(namespace, scope or None)


def _lock_item(scope: str | None, key: str, props: Any) -> dict[str, Any]:
    _, mark, slot = props.name.rpartition("/")[2].partition(SLOT_MARK)
    token = int(props.page_blob_sequence_number or 0)
    owner = Owner.from_metadata(props.metadata or {})
    held = props.lease.state == "leased"
    shown = owner if held and owner is not None and owner.token == token else None
    return {
        "key": key,
        "scope": scope,
        "slot": int(slot) if mark else None,
        "held": held,
        "lease_state": str(props.lease.state),
        "token": token,
        "instance": shown.instance if shown else None,
        "function": shown.function if shown else None,
        "invocation_id": shown.invocation_id if shown else None,
        "since": shown.acquired_at.isoformat() if shown else None,
        "last_change": props.last_modified.isoformat() if props.last_modified else None,
    }


def list_locks(
    prefix: str = "",
    limit: int = 50,
    marker: str | None = None,
    *,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
) -> Page:
    """One page of locks, held or free, whose key starts with `prefix`: `limit` items from
    `marker` (a previous page's `next`). `waiting`: live fair waiters in the key's line;
    `slot`: which slot of a `LeaseSemaphore` (`limit` above 1) the item is, else None. The
    holder shows once it published its owner record (at its first renewal, or at acquire with
    `publish_owner_at_acquire`), else `instance` is null. A held lease lasts at most one period
    (15-60 s) past its last renewal. One listing, plus one per held key for `waiting`."""
    locks = _connection.container(None, _connection.LOCK_CONTAINER, storage)
    ns = resolve_namespace(namespace)
    found, following = _listing(
        locks, ns, validate_prefix(prefix), limit, marker, include=["metadata"]
    )
    items = [_lock_item(scope, key, blob) for scope, key, blob in found]
    waiting: dict[tuple[str | None, str], int] = {}
    for item in items:  # fair waiters in line: one listing per held key (a free one has none)
        held_key = (item["scope"], item["key"])
        if item["held"] and held_key not in waiting:
            name = blob_name(_prefix(ns, item["scope"]), item["key"])
            waiting[held_key] = len(WaitingLine(locks, name, item["key"], MAX_PERIOD).live())
        item["waiting"] = waiting.get(held_key, 0) if item["held"] else 0
    return Page(items, following, ns)


def _run_item(scope: str | None, record: Record, outcome: bool = False) -> dict[str, Any]:
    state = str(record.status)
    if record.status == Status.IN_PROGRESS and record.expired():
        state = "expired"
    item = {
        "key": record.key,
        "scope": scope,
        "state": state,
        "attempt": record.attempt,
        "owner": record.owner,
        "started": _iso(record.started_at),
        "expires": _iso(record.expires_at),
    }
    if outcome:  # what the function returned may hold the app's data: only when asked
        item["outcome"] = record.result if record.status == Status.COMPLETED else None
    return item


def list_runs(
    prefix: str = "",
    state: str | None = None,
    limit: int = 50,
    marker: str | None = None,
    *,
    outcomes: bool = False,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
) -> Page:
    """One page of run-once records whose key starts with `prefix`, only those in `state` if
    given (expiry judged in storage's time); with `outcomes`, each completed run's stored result
    (whatever the function returned). One listing plus one read per record; `state` filters
    after reading, so a page may hold fewer than `limit` items (follow `next`)."""
    if state not in (None, "", *STATES):
        raise InvalidRequest(f"state must be one of {', '.join(STATES)}, not {state!r}")
    records = _connection.container(None, _connection.RECORD_CONTAINER, storage)
    ns = resolve_namespace(namespace)
    found, following = _listing(records, ns, validate_prefix(prefix), limit, marker)
    items = []
    for scope, key, _ in found:
        record = BlobRecordStore(records, namespace=ns, scope=scope).get(key)
        if record is not None:
            item = _run_item(scope, record, outcomes)
            if not state or item["state"] == state:
                items.append(item)
    return Page(items, following, ns)


def _audit(storage: StorageAccount | None, action: str, entry: dict[str, Any]) -> str:
    """Write one audit blob (never overwritten); returns its name."""
    audit = _connection.container(None, AUDIT_CONTAINER, storage)
    now = datetime.now(UTC)
    name = f"{now:%Y/%m/%d}/{now:%H%M%S.%f}-{action}-{uuid.uuid4().hex[:8]}.json"
    body = json.dumps({"action": action, "at": now.isoformat(), **entry}, default=str).encode()
    created_if_missing(
        lambda: audit.get_blob_client(name).upload_blob(body, overwrite=False), audit
    )
    return name


def break_lock(
    key: str,
    reason: str,
    by: str,
    *,
    scope: str | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
    slot: int | None = None,
) -> dict[str, Any]:
    """Break the lease on `key` now (audited); its holder sees the loss at its next renewal.
    `slot`: which slot of a `LeaseSemaphore` (as `list_locks` shows it). Returns the token now:
    the next holder's is higher, so a store that checks tokens refuses the old holder's
    writes."""
    validate_key(key)
    reason = validate_reason(reason)
    locks = _connection.container(None, _connection.LOCK_CONTAINER, storage)
    ns = resolve_namespace(namespace)
    name = blob_name(_prefix(ns, scope), key)
    blob = locks.get_blob_client(name if slot is None else slot_name(name, slot))
    try:
        before = blob.get_blob_properties()
    except HttpResponseError as error:
        if error.status_code == 404:
            raise NotFound(f"no lock with key {key!r}") from error
        raise
    if before.lease.state != "leased":
        raise NotHeld(f"lock {key!r} is not held ({before.lease.state}): nothing to break")
    from azure.storage.blob import BlobLeaseClient

    try:
        BlobLeaseClient(blob).break_lease(lease_break_period=0)
    except HttpResponseError as error:
        if error_code(error) == "LeaseNotPresentWithLeaseOperation":
            raise NotHeld(f"lock {key!r} was released before the break") from error
        raise
    token = int(blob.get_blob_properties().page_blob_sequence_number or 0)
    previous = _lock_item(scope, key, before)
    entry = {"namespace": ns, "scope": scope, "key": key, "token": token, "by": by,
             "reason": reason, "previous": previous}  # fmt: skip
    audit_blob = _audit(storage, "break", entry)
    emit("break", key=key, token=token, by=by, instance=previous["instance"])
    return {**entry, "new_holder_token_exceeds": token, "audit_blob": audit_blob}


def reset_run(
    key: str,
    reason: str,
    by: str,
    *,
    scope: str | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Delete the run-once record of `key` (of function `scope`, else the app's), so the key
    runs again; audited."""
    validate_key(key)
    reason = validate_reason(reason)
    _prefix("", scope)
    store = BlobRecordStore(storage=storage, namespace=namespace, scope=scope or None)
    record = store.get(key)
    if record is None or record.etag is None:
        raise NotFound(f"no run-once record with key {key!r}")
    try:
        store.delete(key, record.etag)
    except RecordConflict as error:
        raise OpsError(f"record {key!r} changed while resetting it; look again") from error
    previous = _run_item(scope, record)
    entry = {"namespace": store.namespace, "scope": scope, "key": key, "by": by,
             "reason": reason, "previous": previous}  # fmt: skip
    audit_blob = _audit(storage, "reset", entry)
    emit("reset", key=key, by=by, state=previous["state"])
    return {**entry, "audit_blob": audit_blob}


def print_table(items: list[dict[str, Any]], columns: Sequence[str], out: Any) -> None:
    """A plain-text table for people: one row per item, columns padded."""
    rows = [[("" if item.get(c) is None else str(item.get(c))) for c in columns] for item in items]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)), file=out)
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)
    if not items:
        print("(none)", file=out)


def default_operator() -> str:
    """Who runs the command, for the audit record."""
    return f"{getpass.getuser()}@{socket.gethostname()} (cli)"


LOCK_COLUMNS = ("key", "scope", "held", "token", "instance", "function", "invocation_id",
                "since", "waiting", "slot")  # fmt: skip
RUN_COLUMNS = ("key", "scope", "state", "attempt", "owner", "started", "expires")


def add_listing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix", default="", help="only keys starting with this")
    parser.add_argument("--limit", type=int, default=50, help="page size (1-200)")
    parser.add_argument("--next", default=None, help="the `next` marker of the previous page")
    parser.add_argument("--json", action="store_true", help="JSON for scripts")
    add_namespace_argument(parser)


def add_namespace_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        default=None,
        help="whose keys (default: BLOBSINGLETON_NAMESPACE, else this app's host id)",
    )


def build_parser(
    prog: str = "python -m blobsingleton.ops", app_listings: Sequence[str] = ()
) -> argparse.ArgumentParser:
    """The CLI's parser; an app adds listing commands of its own (`app_listings`)."""
    parser = argparse.ArgumentParser(prog=prog, description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in app_listings:
        add_listing_arguments(commands.add_parser(name, help=f"the app's {name}"))
    add_listing_arguments(commands.add_parser("locks", help="every lock, held or free"))
    runs = commands.add_parser("runs", help="run-once records")
    add_listing_arguments(runs)
    runs.add_argument("--state", choices=STATES)
    runs.add_argument("--outcomes", action="store_true", help="show completed runs' results")
    for name, text in (("break", "break a held lock"), ("reset", "free a run-once key")):
        command = commands.add_parser(name, help=text)
        command.add_argument("key")
        command.add_argument("--scope", default=None, help="the function, as listings show it")
        command.add_argument("--reason", required=True, help="why (kept in the audit blob)")
        command.add_argument("--by", default=None, help="who (default: user@host)")
        command.add_argument("--json", action="store_true")
        add_namespace_argument(command)
    commands.choices["break"].add_argument(
        "--slot", type=int, default=None, help="which slot of a limit=N key, as listings show it"
    )
    return parser


def run_command(
    args: argparse.Namespace, out: Any = None, storage: StorageAccount | None = None
) -> int:
    """Run one parsed command; errors an operator can fix print one line and return 2."""
    out = out or sys.stdout
    where: dict[str, Any] = {"storage": storage, "namespace": args.namespace}
    scoped = {**where, "scope": getattr(args, "scope", None)}
    by = getattr(args, "by", None) or default_operator()
    actions: dict[str, Callable[[], Any]] = {
        "locks": lambda: list_locks(args.prefix, args.limit, args.next, **where),
        "runs": lambda: list_runs(
            args.prefix, args.state, args.limit, args.next, outcomes=args.outcomes, **where
        ),
        "break": lambda: break_lock(args.key, args.reason, by, slot=args.slot, **scoped),
        "reset": lambda: reset_run(args.key, args.reason, by, **scoped),
    }
    try:
        result = actions[args.command]()
    except (OpsError, InvalidKey) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    show(result, args, out, LOCK_COLUMNS if args.command == "locks" else RUN_COLUMNS)
    return 0


def show(result: Any, args: argparse.Namespace, out: Any, columns: Sequence[str]) -> None:
    """JSON with --json; else a table for a page, or key: value lines for one result."""
    data = result.to_dict() if isinstance(result, Page) else result
    if args.json:
        print(json.dumps(data, indent=2, default=str), file=out)
    elif isinstance(result, Page):
        if result.namespace:
            print(f"namespace: {result.namespace}", file=out)
        print_table(result.items, columns, out)
        if result.next:
            print(f"more: --next {result.next}", file=out)
    else:
        for name, value in data.items():
            print(f"{name}: {json.dumps(value, default=str) if isinstance(value, dict) else value}",
                  file=out)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv))


__all__ = ["InvalidRequest", "NotFound", "NotHeld", "OpsError", "Page", "break_lock",
           "list_locks", "list_runs", "reset_run"]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
