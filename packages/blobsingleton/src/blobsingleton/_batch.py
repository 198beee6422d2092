"""Run-once per item of a batch: `fn.each(items)` on an `@once` function (docs/internals.md)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from blobsingleton import _telemetry as telemetry
from blobsingleton._busy import (
    Admission,
    BusyHandling,
    Guard,
    refuse_unfit_arguments,
)
from blobsingleton._invocation import in_thread, invocation_scope
from blobsingleton._off_loop import off_loop
from blobsingleton._once_handler import OnceHandler
from blobsingleton._records import (
    IN_BODY,
    Record,
    RecordStore,
    Status,
    reads_many,
)
from blobsingleton.errors import BatchFailed, KeyTemplateError

log = logging.getLogger("blobsingleton")

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: What became of one item: its work ran now; a stored result was replayed; not run (the key
#: busy elsewhere under SKIP, or an at-most-once run that never finished); re-enqueued
#: (DEFER); still busy under WAIT (its `error` is `AlreadyInProgress`); or it raised.
#: A batch looks its pending keys up again after a lost create at most once per this many keys.
REFRESH_EVERY = 10

ItemOutcome = Literal["ran", "replayed", "skipped", "deferred", "busy", "failed"]


class ItemResult(Generic[R_co]):
    """One item of a batch: the `item` given, its `key` (None: none could be made, see
    `error`), its `outcome`, what it returned or replayed (`value`), and what it raised. A
    replayed result that lives only in its record's body (a record over 4 KB) is read when
    `value` is first asked for (one request; an error reading it is raised there)."""

    __slots__ = ("_load", "_lock", "_value", "error", "item", "key", "outcome")

    def __init__(
        self, item: Any, key: str | None, outcome: ItemOutcome, value: R_co | None = None,
        error: BaseException | None = None, *, load: Callable[[], R_co] | None = None,
    ) -> None:  # fmt: skip
        self.item, self.key, self.outcome, self.error = item, key, outcome, error
        self._value, self._load, self._lock = value, load, threading.Lock()

    @property
    def value(self) -> R_co | None:
        with self._lock:
            if self._load is not None:
                self._value, self._load = self._load(), None
            return self._value

    def __repr__(self) -> str:
        value = "<not read yet>" if self._load is not None else repr(self._value)
        return (f"ItemResult(key={self.key!r}, outcome={self.outcome!r}, value={value}, "
                f"error={self.error!r})")  # fmt: skip


class BatchResult(Sequence[ItemResult[R_co]]):
    """The items of one `each` call, in the batch's order."""

    def __init__(self, function: str, items: list[ItemResult[R_co]]) -> None:
        self.function = function
        self._items = items

    @overload
    def __getitem__(self, index: int) -> ItemResult[R_co]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ItemResult[R_co]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[ItemResult[R_co]]:
        return iter(self._items)

    @property
    def failed(self) -> list[ItemResult[R_co]]:
        """The items that raised, or stayed busy under WAIT (each has its `error`)."""
        return [item for item in self._items if item.error is not None]

    def counts(self) -> dict[str, int]:
        """How many items had each outcome (only the outcomes that occurred)."""
        counted: dict[str, int] = {}
        for item in self._items:
            counted[item.outcome] = counted.get(item.outcome, 0) + 1
        return counted

    def values(self) -> list[R_co | None]:
        """Each item's `value` (what it returned, or replayed), in the batch's order."""
        return [item.value for item in self._items]

    def raise_if_failed(self) -> None:
        """Raise `BatchFailed` (from the first error) if any item failed: the host then
        retries or abandons the batch as it does for any raise (README, "Batches")."""
        failed = self.failed
        if failed:
            errors = tuple(item.error for item in failed if item.error is not None)
            keys = tuple(item.key for item in failed)
            raise BatchFailed(self.function, len(self._items), keys, errors) from errors[0]


class OnceFunction(Protocol[P, R_co]):
    """An `@once` function: called as itself, or `each(items, *args, **kwargs)`, which calls
    it once per item (the item first, then `args` and `kwargs`)."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def each(self, items: Iterable[Any], /, *args: Any, **kwargs: Any) -> BatchResult[R_co]: ...


class AsyncOnceFunction(Protocol[P, R_co]):
    """An async `@once` function: awaited as itself, or `await each_async(items, ...)`."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R_co]: ...

    def each_async(
        self, items: Iterable[Any], /, *args: Any, **kwargs: Any
    ) -> Coroutine[Any, Any, BatchResult[R_co]]: ...


class OnceDecorator(Protocol):
    """What `once(...)` returns under WAIT or a callable, at least once: a decorator whose
    function returns what it returns (or raises), with `each` (`each_async` when async)."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # a coroutine function is the async one
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncOnceFunction[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> OnceFunction[P, R]: ...


class MaybeSkippedOnce(Protocol):
    """What `once(...)` returns with SKIP, DEFER or AT_MOST_ONCE: the function may not run (a
    skipped, deferred or abandoned call gives None)."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # a coroutine function is the async one
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncOnceFunction[P, R | None]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> OnceFunction[P, R | None]: ...


class _LookUp:
    """One look-up of many keys of a batch on one store (`OnceHandler.enter(listed=...)`): each
    key's first look starts from the record found (decided as any record found on a create:
    completed, replayed; in progress, busy; expired, taken over by a conditional replace) or,
    found absent, creates it conditionally, so a run another instance started since still runs
    once. A create that loses a race (another instance works on the same batch) has the keys
    not yet claimed looked up again before the next create (once per REFRESH_EVERY keys at
    most), so a batch behind another one replays what it finished instead of racing it key by
    key."""

    def __init__(self, store: RecordStore, found: dict[str, Record | None],
                 keys: Sequence[str]) -> None:  # fmt: skip
        self.store = store
        self._found = found
        self._pending = dict.fromkeys(keys)
        self._stale = False
        #: A create lost a race: another instance works on the same batch.
        self.contended = False
        self._refreshes = max(1, len(self._pending) // REFRESH_EVERY)
        self._lock = threading.Lock()

    def first_look(self, key: str) -> tuple[bool, Record | None]:
        """Whether `key` was looked at, and the record found (once; a record whose result is in
        its body is read whole by the claim)."""
        with self._lock:
            self._pending.pop(key, None)
            if self._stale and self._refreshes > 0 and self._pending:
                self._stale, self._refreshes = False, self._refreshes - 1
                try:
                    self._found.update(self.store.get_many([key, *self._pending]))
                except Exception as error:  # each key's claim reads what it needs
                    log.warning("run-once batch: keys not looked up again: %r", error)
            looked = key in self._found
            listed = self._found.pop(key, None)
        if listed is not None and listed.result is IN_BODY:
            return False, None
        return looked, listed

    def lost(self) -> None:
        with self._lock:
            self._stale = self.contended = True

    def stored_in_body(self, key: str) -> Record | None:
        """The completed record listed for `key` whose result is in its body (taken), or None."""
        with self._lock:
            listed = self._found.get(key)
            if listed is None or listed.result is not IN_BODY:
                return None
            if listed.status != Status.COMPLETED or listed.expired():
                return None
            self._pending.pop(key, None)
            return self._found.pop(key)


def _look_up(entries: Sequence[_Item]) -> None:
    """One look-up of every guarded key per store (where the store can), then each item's
    claim starts from what it found (`_Item.listed`)."""
    stores: dict[int, tuple[RecordStore, list[_Item]]] = {}
    for entry in entries:
        if isinstance(entry.guard, OnceHandler):
            store = entry.guard.store
            stores.setdefault(id(store), (store, []))[1].append(entry)
    for store, grouped in stores.values():
        if len(grouped) < 2 or not reads_many(store):
            continue
        keys = [entry.guard.key for entry in grouped if isinstance(entry.guard, OnceHandler)]
        try:
            found = store.get_many(keys)
        except Exception as error:  # each key's own claim reads what it needs
            log.warning("run-once batch: %d keys not looked up at once: %r", len(keys), error)
            continue
        first = grouped[0].guard
        if isinstance(first, OnceHandler) and first.speed is not None:
            first.speed.looked_up(found)  # (one speed layer per store)
        look_up = _LookUp(store, found, keys)
        for entry in grouped:
            entry.listed = look_up


@dataclass
class _Item:
    """One item on its way through `each`."""

    index: int
    item: Any
    guard: Guard | None
    arguments: dict[str, Any]
    result: ItemResult[Any] | None = None
    #: The batch's look-up of its key's store, if one was made.
    listed: _LookUp | None = None

    @property
    def key(self) -> str | None:
        return None if self.guard is None else self.guard.describe().get("key")


@dataclass(frozen=True)
class BatchSpec:
    """What `each` needs of one `@once` function (built by `once`)."""

    fn: Callable[..., Any]
    make_guard: Callable[..., Guard]
    busy: BusyHandling
    label: tuple[str, str]
    bind: Callable[..., dict[str, Any]]
    #: Seconds a busy item is held watching (shared by the batch's busy items), and waited for
    #: under WAIT (shared likewise).
    hold: float
    wait_timeout: float

    def prepare(self, items: Iterable[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> list[_Item]:  # fmt: skip
        """Each item's guard (its key resolved), then one look-up of every key."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise TypeError(f"each() takes the batch's items (a list), not {type(items).__name__}")
        items = list(items)
        for item in items[:1]:  # an item's call refused as a single call is (DEFER's fit)
            refuse_unfit_arguments(self.fn, self.busy, (item, *args), kwargs)
        prepared = []
        for index, item in enumerate(items):
            call_args = (item, *args)
            entry = _Item(index, item, None, self.bind(*call_args, **kwargs))  # TypeError: all
            try:
                entry.guard = self.make_guard(*call_args, **kwargs)
            except Exception as error:  # no key (KeyTemplateError, InvalidKey...): this item fails
                entry.result = ItemResult(item, None, "failed", error=error)
            prepared.append(entry)
        _look_up(prepared)
        return prepared

    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def replayed_lazily(self, entry: _Item) -> bool:
        """Whether `entry` was found completed with its result in its record's body: then it
        is replayed, the result read when asked for (`ItemResult.value`)."""
        handler = entry.guard
        if not isinstance(handler, OnceHandler) or entry.listed is None:
            return False
        record = entry.listed.stored_in_body(handler.key)
        if record is None:
            return False
        load = handler.replay_later(record)
        entry.result = ItemResult(entry.item, handler.key, "replayed", load=load)
        return True

    def admitted(self, entry: _Item, admission: Admission, call: telemetry.Invocation) -> bool:
        """Whether `entry` runs; else its result is what a single call would have returned
        (`BusyHandling.not_admitted`: replayed, skipped, deferred...), or, still busy where a
        single call raises (WAIT), the busy error."""
        guard = entry.guard
        assert guard is not None
        call.waited(**guard.describe())
        if admission.run:
            return True
        try:
            value = self.busy.not_admitted(call, admission, self.name(), entry.arguments)
        except Exception as error:
            if error is not admission.busy:
                raise
            entry.result = ItemResult(entry.item, entry.key, "busy", error=error)
            return False
        entry.result = ItemResult(entry.item, entry.key, _outcome(call.outcome), value)
        return False


def _outcome(name: str) -> ItemOutcome:
    known: tuple[ItemOutcome, ...] = ("replayed", "skipped", "deferred", "busy")
    return next((outcome for outcome in known if outcome == name), "skipped")


#: An item's look: whether it waits, and the hold and wait timeout left of the batch's budget.
_Look = tuple[bool, float, float]


def _enter(entry: _Item, look: _Look) -> Admission:
    guard = entry.guard
    wait, hold, timeout = look
    if isinstance(guard, OnceHandler):
        return guard.enter(wait, hold=hold, timeout=timeout, listed=entry.listed)
    assert guard is not None
    return guard.enter(wait)


async def _enter_async(entry: _Item, look: _Look) -> Admission:
    guard = entry.guard
    wait, hold, timeout = look
    if isinstance(guard, OnceHandler):
        return await guard.enter_async(wait, hold=hold, timeout=timeout, listed=entry.listed)
    assert guard is not None
    return await guard.enter_async(wait)


def _busy_now(admission: Admission) -> bool:
    return not admission.run and admission.busy is not None


def _failed(entry: _Item, error: BaseException) -> None:
    """`entry` raised (its work, or its completion after the work ran: the value is kept)."""
    ran = entry.result if entry.result is not None and entry.result.outcome == "ran" else None
    value = None if ran is None else ran.value
    entry.result = ItemResult(entry.item, entry.key, "failed", value, error)


def _free(guard: Guard, key: str | None) -> None:
    """Give back a failed item's key; a free that fails leaves its record to expire."""
    try:
        guard.settle(None, failed=True)
    except Exception as error:
        log.warning("run-once batch: key %s not freed (its record expires): %r", key, error)


def _first_looks(prepared: list[_Item]) -> Iterator[tuple[_Item, _Look]]:
    """The items with a key, in the batch's order, without holding or waiting; once a create
    lost a race (another instance works on the same batch, from its start), from the end:
    the two meet in the middle instead of racing for every item."""
    pending = deque(e for e in prepared if e.result is None and e.guard is not None)
    look_ups = {id(e.listed): e.listed for e in pending if e.listed is not None}
    while pending:
        contended = any(look_up.contended for look_up in look_ups.values())
        entry = pending.pop() if contended else pending.popleft()
        yield entry, (False, 0.0, 0.0)


def _second_looks(spec: BatchSpec, busy: list[_Item]) -> Iterator[tuple[_Item, _Look]]:
    """The busy items again (looked up at once again before: those finished elsewhere since
    are replayed without a request each), holding and waiting within one budget they share."""
    started = time.monotonic()
    for entry in busy:
        spent = time.monotonic() - started
        yield entry, (spec.busy.waits_for(entry.arguments), spec.hold - spent,
                      spec.wait_timeout - spent)  # fmt: skip


def each(spec: BatchSpec, items: Iterable[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
         ) -> BatchResult[Any]:  # fmt: skip
    """Run `spec.fn` once per item (see README, "Batches"): items in order (from the end once
    another instance is seen working the batch), a busy one after the others; one item's
    failure stops none of the others."""
    with invocation_scope(kwargs):
        prepared = spec.prepare(items, args, kwargs)
        busy: list[_Item] = []
        for entry, look in _first_looks(prepared):  # no holding, no waiting
            _one(spec, entry, args, kwargs, look=look, busy=busy)
        _look_up(busy)
        for entry, look in _second_looks(spec, busy):
            _one(spec, entry, args, kwargs, look=look, busy=None)
    return BatchResult(spec.name(), [_final(entry) for entry in prepared])


def _one(spec: BatchSpec, entry: _Item, args: tuple[Any, ...], kwargs: dict[str, Any],
         *, look: _Look, busy: list[_Item] | None) -> None:  # fmt: skip
    """One item's look, and its run if admitted; busy at a first look, it joins `busy`."""
    guard = entry.guard
    assert guard is not None
    try:
        with telemetry.invocation(*spec.label) as call:
            if spec.replayed_lazily(entry):
                call.outcome = "replayed"
                return
            admission = _enter(entry, look)
            if busy is not None and _busy_now(admission):
                call.outcome = "busy"  # looked at again after the others
                busy.append(entry)
                return
            if not spec.admitted(entry, admission, call):
                return
            try:
                with guard.running():
                    value = spec.fn(entry.item, *args, **kwargs)
            except BaseException:
                _free(guard, entry.key)
                raise
            entry.result = ItemResult(entry.item, entry.key, "ran", value)
            guard.settle(value, failed=False)
    except Exception as error:  # this item's; the others go on
        _failed(entry, error)


async def each_async(
    spec: BatchSpec, items: Iterable[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> BatchResult[Any]:
    """`each` for an async function: no blocking call on the loop."""
    with invocation_scope(kwargs):
        prepared = await off_loop(in_thread(lambda: spec.prepare(items, args, kwargs)))
        busy: list[_Item] = []
        for entry, look in _first_looks(prepared):
            await _one_async(spec, entry, args, kwargs, look=look, busy=busy)
        await off_loop(in_thread(lambda: _look_up(busy)))
        for entry, look in _second_looks(spec, busy):
            await _one_async(spec, entry, args, kwargs, look=look, busy=None)
    return BatchResult(spec.name(), [_final(entry) for entry in prepared])


async def _one_async(spec: BatchSpec, entry: _Item, args: tuple[Any, ...],
                     kwargs: dict[str, Any], *, look: _Look, busy: list[_Item] | None
                     ) -> None:  # fmt: skip
    guard = entry.guard
    assert guard is not None
    try:
        with telemetry.invocation(*spec.label) as call:
            if spec.replayed_lazily(entry):
                call.outcome = "replayed"
                return
            admission = await _enter_async(entry, look)
            if busy is not None and _busy_now(admission):
                call.outcome = "busy"
                busy.append(entry)
                return
            if _busy_now(admission) and spec.busy.defers:  # a blocking send
                admitted = await off_loop(in_thread(lambda: spec.admitted(entry, admission, call)))
            else:
                admitted = spec.admitted(entry, admission, call)
            if not admitted:
                return
            try:
                with guard.running():
                    value = await spec.fn(entry.item, *args, **kwargs)
            except BaseException:
                await off_loop(in_thread(lambda: _free(guard, entry.key)))
                raise
            entry.result = ItemResult(entry.item, entry.key, "ran", value)
            await off_loop(in_thread(lambda: guard.settle(value, failed=False)))
    except Exception as error:
        _failed(entry, error)


def _final(entry: _Item) -> ItemResult[Any]:
    assert entry.result is not None, "every item of a batch ends with a result"
    return entry.result


def list_hint(error: KeyTemplateError, bound: dict[str, Any]) -> KeyTemplateError:
    """`error`, or a clearer one when the invocation was given a batch: a list the field names,
    or a list of messages, events or documents (not of strings or numbers)."""
    head = error.field.split(".")[0]
    batches = [
        name for name, value in bound.items()
        if isinstance(value, (list, tuple)) and (name == head or _of_items(value))
    ]  # fmt: skip
    if not batches:
        return error
    name = batches[0]
    return KeyTemplateError(
        error.template, error.field,
        f"cannot be read: {name!r} is a list of {len(bound[name])} items (a batch: a trigger "
        f"with cardinality='many'); a key is one item's: call fn.each({name}) to run each "
        "item once (README, 'Batches')",
    )  # fmt: skip


def _of_items(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether `values` holds messages, events or documents (objects, not scalars)."""
    return bool(values) and not isinstance(values[0], (str, bytes, int, float))
