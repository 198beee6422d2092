"""Mistakes a user is likely to make, refused (or warned about) where they are made, each with
the fix in the message: a parameter removed in a release (its new spelling), a decorator above
the trigger's, a key that names less than its item's identity, a sync guarded function called
on a running event loop, `.each` on an async function. The decorators call in with one line
each; nothing here runs on a call's path (`warn_on_loop` only once a call is known to be on a
running loop)."""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, TypeVar

from blobsingleton import _keys
from blobsingleton.errors import KeyTemplateError

F = TypeVar("F", bound=Callable[..., Any])

#: The release that removed them, and where its migration table is.
_RELEASE = "0.5 (the changelog's 0.5.0 entry has the migration table)"

#: Parameters of `busy=`'s policy in 0.4, by decorator: folded into one `busy=` value.
_BUSY_PARTS = ("on_in_progress", "on_busy", "wait_timeout", "queue", "defer_seconds", "hold_busy")
#: Parameters of where things live in 0.4: folded into one `storage=` value.
_STORAGE_PARTS = ("store", "namespace", "container")
_REMOVED = {*_BUSY_PARTS, *_STORAGE_PARTS, "under_lease"}


def teaches_renames(decorator: str) -> Callable[[F], F]:
    """Wrap a decorator factory (`once`, `singleton`) so that a parameter removed in 0.5 is
    refused with its 0.5 spelling (Python's own error names only the parameter)."""

    def wrap(factory: F) -> F:
        @functools.wraps(factory)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if not _REMOVED.isdisjoint(kwargs):
                refuse_removed(decorator, kwargs)
            return factory(*args, **kwargs)

        return checked  # type: ignore[return-value]  # the factory's own signature, wrapped

    return wrap


def refuse_removed(decorator: str, given: Mapping[str, Any]) -> NoReturn:
    """Raise `TypeError` naming the removed parameters among `given` and what replaces them,
    spelt from their values (`on_in_progress=Busy.SKIP` -> `busy=Busy.skip()`)."""
    removed = [name for name in given if name in _REMOVED]
    fixes = []
    if any(name in given for name in _BUSY_PARTS):
        fixes.append(f"busy={_busy_spelling(given)}")
    if any(name in given for name in _STORAGE_PARTS):
        fixes.append(f"storage={_storage_spelling(given)}")
    if "under_lease" in given:
        fixes.append("nothing for under_lease (a @once inside a @singleton knows its lease)")
    names = ", ".join(f"{name}=" for name in removed)
    raise TypeError(
        f"@{decorator}({names}): removed in {_RELEASE}; write "
        + " and ".join(fixes)
        + (" (the other arguments unchanged)" if len(given) > len(removed) else "")
    )


def _busy_spelling(given: Mapping[str, Any]) -> str:
    """The 0.5 `busy=` value for 0.4's policy parameters."""
    policy = given.get("on_in_progress", given.get("on_busy"))
    hold = given.get("hold_busy")
    kind = type(policy).__name__ if policy is not None else "Wait"
    if kind == "Skip":
        return _call("Busy.skip", hold=hold)
    if kind == "Defer":
        queue = given.get("queue", getattr(policy, "queue", None))
        return _call("Busy.defer", queue=queue or "<the queue>", after=given.get("defer_seconds"),
                     hold=hold)  # fmt: skip
    if kind == "Answer" or (callable(policy) and kind != "Wait"):
        name = getattr(getattr(policy, "fn", policy), "__name__", "fn")
        return _call("Busy.answer", name, hold=hold) if hold is not None else name
    return _call("Busy.wait", timeout=given.get("wait_timeout"), hold=hold)


def _storage_spelling(given: Mapping[str, Any]) -> str:
    """The 0.5 `storage=` value for 0.4's `store=`, `storage=`+`namespace=`, `container=`."""
    if "store" in given:
        return "<the same store> (a RecordStore goes to storage=)"
    account = "<the account>" if given.get("storage") is not None else None
    container = "<the container client>" if "container" in given else None
    return _call("Storage", account=account, namespace=given.get("namespace"), container=container)


def _call(name: str, *positional: str, **named: Any) -> str:
    """`name(...)` spelt with the arguments that are not None (strings quoted, placeholders
    for values shown as `<...>`)."""
    parts = list(positional)
    for key, value in named.items():
        if value is None:
            continue
        shown = value if isinstance(value, str) and value.startswith("<") else repr(value)
        parts.append(f"{key}={shown}")
    return f"{name}({', '.join(parts)})"


def check_target(decorator: str, templates: Iterable[str], fn: Any) -> None:
    """At decoration: refuse a decorator placed above a trigger decorator of azure-functions
    (given its `FunctionBuilder`, not the function), and a key template whose dotted path
    through a trigger parameter names less than the item's identity (`partial_identity`)."""
    cls = type(fn)
    if cls.__module__.startswith("azure.functions") and cls.__name__ == "FunctionBuilder":
        raise TypeError(
            f"@{decorator} is above a trigger decorator (@app.queue_trigger, "
            "@app.route, ...): it was given what azure-functions registers, not the function, "
            "so the host would call the function unguarded. Put it under every @app "
            "decorator, right above the def:\n\n"
            "    @app.queue_trigger(arg_name='msg', queue_name='orders', connection='...')\n"
            f"    @{decorator}('...')\n"
            "    def take_order(msg: func.QueueMessage) -> None: ..."
        )
    if not callable(fn):
        raise TypeError(f"@{decorator} decorates a function, not {fn!r}")
    kinds = _trigger_parameters(fn)
    if not kinds:
        return
    for template in templates:
        _refuse_partial_paths(template, kinds)


def _trigger_parameters(fn: Callable[..., Any]) -> dict[str, _keys.TriggerKind]:
    """The parameters of `fn` annotated as a trigger argument (`func.EventHubEvent`...)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    found = {}
    for parameter in parameters:
        annotation = parameter.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`: by its name
            kind = _keys.TRIGGERS.get(annotation.rpartition(".")[2])
        elif isinstance(annotation, type):
            kind = _keys.trigger_kind_of_class(annotation)
        else:
            kind = None
        if kind is not None:
            found[parameter.name] = kind
    return found


def _refuse_partial_paths(template: str, kinds: Mapping[str, _keys.TriggerKind]) -> None:
    """Refuse `template` when a path through a trigger parameter reads a name unique only
    within a scope and no field of the template could name the scope (a bare name might: it
    is judged at the call, where a body field may stand for it)."""
    fields = [match.group(1) for match in _keys.FIELD.finditer(template)]
    for argument, kind in kinds.items():
        used: dict[str, str] = {}
        for field in fields:
            head, *path = field.split(".")
            if head == argument and path:
                used[path[-1]] = field
            elif not path:
                used.setdefault(head, field)  # a bare name: may complete, never refused here
        partial = {name: field for name, field in used.items() if "." in field}
        if any(name in kind.completes for name in used):
            continue
        refused = _keys.partial_identity(kind, partial, argument)
        if refused is not None:
            raise KeyTemplateError(template, *refused)


def warn_on_loop(fn: Callable[..., Any]) -> None:
    """Warn that sync guarded `fn` was called on a running event loop (the caller looked, so
    a call off any loop never comes here): its waits and storage requests block the loop and
    every task on it."""
    name = getattr(fn, "__qualname__", "the function")
    warnings.warn(
        f"{name} is a sync guarded function called on a running event loop: waiting for its key "
        "and its storage requests block the loop. Make it `async def` (the library then never "
        f"blocks the loop; `await fn.each_async(items)` for a batch), or call it with "
        f"`await asyncio.to_thread({name.rpartition('.')[2]}, ...)`",
        RuntimeWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The `stacklevel` of the first frame outside the library (its wrappers run code filed
    under the user's file, but in the library's globals), seen from `warn_on_loop`."""
    frame = sys._getframe(2)
    level = 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(
        "blobsingleton."
    ):
        frame, level = frame.f_back, level + 1
    return level


def async_each(fn: Callable[..., Any]) -> Callable[..., NoReturn]:
    """What an async `@once` function's `each` is: an `AttributeError` naming `each_async`."""

    def each(*_: Any, **__: Any) -> NoReturn:
        raise AttributeError(
            f"{fn.__qualname__} is async: its batch method is `each_async`, "
            "`await fn.each_async(items)` (`each` is the sync functions')"
        )

    return each
