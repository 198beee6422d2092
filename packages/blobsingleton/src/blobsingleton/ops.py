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

from blobsingleton import _connection, _listing
from blobsingleton._blob_lease import WaitingLine
from blobsingleton._blob_records import BlobRecordStore, RecordBlob, quoted_etag
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton._keys import blob_name, encode_key, validate_key
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._keys import prefix as scoped_prefix
from blobsingleton._lease import MAX_PERIOD, SLOT_MARK, slot_name
from blobsingleton._owner import Owner
from blobsingleton._records import IN_BODY, Record, Status
from blobsingleton._storage_errors import Meaning, created_if_missing, meaning, unavailable_as
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
    #: The page stopped at the bound on storage requests before it was full: more may match
    #: after `next` (a filter that matches little of a long listing).
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "items": self.items, "next": self.next,
                "partial": self.partial}  # fmt: skip


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


def _sources(container: Any, namespace: str, prefix: str) -> list[str]:
    """The storage prefixes of the keys starting with `prefix`: the app's, and each function's
    own (one listing of the function scopes). Storage filters by them: a page holds matches."""
    if not prefix:
        return [f"{namespace}/"]
    encoded = encode_key(prefix)
    scopes = container.walk_blobs(name_starts_with=f"{namespace}/@", delimiter="/")
    found = [str(p.name)[len(namespace) + 2 : -1] for p in scopes if str(p.name).endswith("/")]
    return [f"{namespace}/{encoded}"] + [
        f"{namespace}/@{scope}/{encoded}" for scope in found if _SCOPE.fullmatch(scope)
    ]


def _scan(
    container: Any,
    namespace: str,
    prefix: str,
    limit: int,
    marker: str | None,
    fetch: _listing.Fetch[dict[str, Any]],
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> Page:
    """One page of the items `fetch` makes of the blobs whose key starts with `prefix`, those
    `keep` keeps: storage pages are listed (prefix sent to storage) until the page is full or
    the listing ends, at most `_listing.MAX_SCAN_REQUESTS` List Blobs requests per call."""
    try:
        with unavailable_as("list"):
            sources = _sources(container, namespace, prefix)
            found = _listing.scan(sources, fetch, limit, marker, keep)
    except ValueError as error:
        raise InvalidRequest(str(error)) from None
    except HttpResponseError as error:
        if meaning(error) is Meaning.NO_CONTAINER or error.status_code == 404:
            return Page([], None, namespace)
        raise
    return Page(found.items, found.next_marker, namespace, partial=found.partial)


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
    held: bool | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
) -> Page:
    """One page of locks whose key starts with `prefix` (sent to storage as the listing's
    prefix), only held (`held=True`) or free ones if asked: `limit` items from `marker` (a
    previous page's `next`). `waiting`: live fair waiters in the key's line; `slot`: which slot
    of a `LeaseSemaphore` (`limit` above 1) the item is, else None. The holder shows once it
    published its owner record (at its first renewal, or at acquire with
    `publish_owner_at_acquire`), else `instance` is null. A held lease lasts at most one period
    (15-60 s) past its last renewal (`last_change`: its last renewal that rewrote the owner
    record, or its acquire). Storage pages are listed until the page is full or the listing
    ends (at most `_listing.MAX_SCAN_REQUESTS`), plus one listing per held key for `waiting`."""
    locks = _connection.container(None, _connection.LOCK_CONTAINER, storage)
    ns = resolve_namespace(namespace)

    def fetch(
        source: str, size: int, storage_marker: str | None
    ) -> tuple[list[tuple[str, dict[str, Any] | None]], str | None]:
        # by_page() is typed as a plain iterator; it is azure-core's PageIterator, with the token
        pages: Any = locks.list_blobs(
            name_starts_with=source, include=["metadata"], results_per_page=size
        ).by_page(continuation_token=storage_marker)
        page = list(next(pages, []))
        return [(b.name, _lock_of(b, ns)) for b in page], pages.continuation_token or None

    keep = None if held is None else (lambda item: bool(item["held"]) == held)
    page = _scan(locks, ns, validate_prefix(prefix), limit, marker, fetch, keep)
    waiting: dict[tuple[str | None, str], int] = {}
    for item in page.items:  # fair waiters in line: one listing per held key (a free one has none)
        held_key = (item["scope"], item["key"])
        if item["held"] and held_key not in waiting:
            name = blob_name(_prefix(ns, item["scope"]), item["key"])
            waiting[held_key] = len(WaitingLine(locks, name, item["key"], MAX_PERIOD).live())
        item["waiting"] = waiting.get(held_key, 0) if item["held"] else 0
    return page


def _lock_of(blob: Any, namespace: str) -> dict[str, Any] | None:
    named = _key_of(blob.name, namespace)
    return None if named is None else _lock_item(*named, blob)


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
        # in storage's time (the reader's clock may drift): negative once expired
        "expires_in_s": round(record.remaining(), 1),
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
    """One page of run-once records whose key starts with `prefix` (sent to storage as the
    listing's prefix), only those in `state` if given (expiry judged in storage's time): the
    listing goes on until the page holds `limit` of them or ends (at most
    `_listing.MAX_SCAN_REQUESTS` List Blobs requests; `partial` says the bound came first).
    Each record is read from its listing's metadata (a read only for one that carries neither
    record nor summary); with `outcomes`, each completed run's stored result (whatever the
    function returned; a read when it is kept in the body only)."""
    if state not in (None, "", *STATES):
        raise InvalidRequest(f"state must be one of {', '.join(STATES)}, not {state!r}")
    records = _connection.container(None, _connection.RECORD_CONTAINER, storage)
    ns = resolve_namespace(namespace)
    stores: dict[str | None, BlobRecordStore] = {}

    def read(scope: str | None, key: str) -> Record | None:
        store = stores.get(scope) or stores.setdefault(
            scope, BlobRecordStore(records, namespace=ns, scope=scope)
        )
        return store.get(key)

    def fetch(
        source: str, size: int, storage_marker: str | None
    ) -> tuple[list[tuple[str, dict[str, Any] | None]], str | None]:
        page = _listing.list_page(records, source, size, storage_marker)
        found: list[tuple[str, dict[str, Any] | None]] = []
        for blob in page.items:
            named = _key_of(blob.name, ns)
            record = None if named is None else RecordBlob.from_metadata(
                blob.metadata, quoted_etag(blob.etag), blob.last_modified, page.served_at,
                summary=True,
            )  # fmt: skip
            if named is not None and (record is None or (outcomes and record.result is IN_BODY)):
                record = read(*named)  # too large for the metadata: its body
            found.append((blob.name, None if named is None or record is None
                          else _run_item(named[0], record, outcomes)))  # fmt: skip
        return found, page.next_marker

    keep = (lambda item: item["state"] == state) if state else None
    return _scan(records, ns, validate_prefix(prefix), limit, marker, fetch, keep)


def count_runs(
    *, storage: StorageAccount | None = None, namespace: str | None = None
) -> dict[str, int]:
    """How many run-once records are in each state (`STATES`), from one listing with metadata
    (one List Blobs request per 5,000 records; a record too large for its metadata is counted
    from its summary)."""
    records = _connection.container(None, _connection.RECORD_CONTAINER, storage)
    ns = resolve_namespace(namespace)
    counts = dict.fromkeys(STATES, 0)
    try:
        with unavailable_as("list"):
            listed, served_at = _listing.list_all(records, f"{ns}/")
    except HttpResponseError as error:
        if meaning(error) is Meaning.NO_CONTAINER or error.status_code == 404:
            return counts
        raise
    for blob in listed:
        named = _key_of(blob.name, ns)
        record = None if named is None else RecordBlob.from_metadata(
            blob.metadata, quoted_etag(blob.etag), blob.last_modified, served_at, summary=True
        )  # fmt: skip
        if record is not None:
            counts[_run_item(None, record)["state"]] += 1
    return counts


def _find_scope(
    lister: Callable[..., Page], key: str, storage: StorageAccount | None, namespace: str | None
) -> str | None:
    """The scope of the one lock or record named exactly `key` when none was given: the app's
    if it has one, else the one function's that has it; `NotFound` or, when several functions
    have it, `InvalidRequest` naming them (listings are by prefix: filtered to the key)."""
    found: list[str | None] = []
    marker = None
    while True:
        page = lister(key, limit=MAX_PAGE, marker=marker, storage=storage, namespace=namespace)
        found += [i["scope"] for i in page.items if i["key"] == key and i["scope"] not in found]
        marker = page.next
        if not marker:
            break
    if None in found or not found:
        return None  # the app's own, or nothing anywhere (the caller says which)
    if len(found) > 1:
        scopes = ", ".join(sorted(str(s) for s in found))
        raise InvalidRequest(f"{key!r} is the key of several functions ({scopes}): say which "
                             "with --scope (?scope=)")  # fmt: skip
    return found[0]


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
    `slot`: which slot of a `LeaseSemaphore` (as `list_locks` shows it). `scope` None: the
    app's lock, else the one function's lock of that key (found; the answer names it).
    Returns the token now: the next holder's is higher, so a store that checks tokens refuses
    the old holder's writes."""
    validate_key(key)
    reason = validate_reason(reason)
    if scope is None:
        scope = _find_scope(list_locks, key, storage, namespace)
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
        if meaning(error) is Meaning.NOT_OURS:
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
    """Delete the run-once record of `key` (of function `scope`; None: the app's, else the one
    function's record of that key, found, and named in the answer), so the key runs again;
    audited."""
    validate_key(key)
    reason = validate_reason(reason)
    _prefix("", scope)
    if scope is None:
        scope = _find_scope(list_runs, key, storage, namespace)
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
    locks = commands.add_parser("locks", help="every lock, held or free")
    add_listing_arguments(locks)
    locks.add_argument("--held", action="store_true", help="only held locks")
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
        "locks": lambda: list_locks(
            args.prefix, args.limit, args.next, held=True if args.held else None, **where
        ),
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
           "count_runs", "list_locks", "list_runs", "reset_run"]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
