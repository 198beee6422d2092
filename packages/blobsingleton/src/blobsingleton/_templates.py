"""Resolve key templates like `[Singleton("{Region}")]` from the arguments (docs/internals.md)."""

from __future__ import annotations

import inspect
import json
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Literal, Protocol, runtime_checkable

import timerschedules

from blobsingleton.errors import KeyTemplateError, SettingMissing
from blobsingleton.queues import QueueMessageLike
from blobsingleton.settings import resolve_placeholders

#: Whose keys: a function's own, or the app's (WebJobs' SingletonScope.Function / Host).
Scope = Literal["function", "app"]
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


@runtime_checkable
class HttpRequestLike(Protocol):
    """What key templates read of `azure.functions.HttpRequest`."""

    @property
    def route_params(self) -> Mapping[str, str]: ...

    @property
    def params(self) -> Mapping[str, str]: ...


@runtime_checkable
class TimerRequestLike(Protocol):
    """What key templates read of `azure.functions.TimerRequest`."""

    @property
    def past_due(self) -> bool: ...

    @property
    def schedule_status(self) -> Mapping[str, Any] | None: ...


def resolve_key(
    template: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    schedule: str | None = None,
) -> str:
    """The key `template` names for one invocation of a function with `signature`."""
    bound = signature.bind_partial(*args, **kwargs).arguments
    text = resolve_placeholders(template)
    return _FIELD.sub(lambda m: _lookup(template, m.group(1), bound, schedule), text)


def _lookup(template: str, field: str, bound: Mapping[str, Any], schedule: str | None) -> str:
    head, *path = field.split(".")
    if head in bound:
        return _follow(template, field, bound[head], path)
    for value in bound.values():
        if isinstance(value, HttpRequestLike):
            for source in (value.route_params, value.params):
                if head in source:
                    return _follow(template, field, source[head], path)
        elif isinstance(value, QueueMessageLike):
            body = _json_object(value)
            if body is not None and head in body:
                return _follow(template, field, body[head], path)
        elif isinstance(value, TimerRequestLike) and head == "occurrence" and not path:
            return _occurrence(template, value, schedule)
    raise KeyTemplateError(
        template,
        field,
        "is not an argument, a JSON body field, a route or query parameter of this invocation",
    )


#: Values a key may be made of. Anything else (a list, a dict, an object) has no one spelling.
_SCALARS = (str, int, float, Decimal, uuid.UUID, date)


def _follow(template: str, field: str, value: Any, path: list[str]) -> str:
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            raise KeyTemplateError(template, field, f"has no {part!r}")
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        raise KeyTemplateError(template, field, "is missing (null)")
    if isinstance(value, bool) or not isinstance(value, _SCALARS):
        kind = type(value).__name__
        raise KeyTemplateError(template, field, f"is a {kind}, not a string or a number")
    text = str(value)
    if not text.strip():
        raise KeyTemplateError(template, field, "is empty or blank")
    return text


def function_scope(fn: Callable[..., Any]) -> str:
    """A function's own scope: its module and qualified name as a blob name segment."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{fn.__module__}.{fn.__qualname__}")


def _json_object(message: QueueMessageLike) -> dict[str, Any] | None:
    try:
        body = json.loads(message.get_body())
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _occurrence(
    template: str, timer: TimerRequestLike, schedule: str | None, now: datetime | None = None
) -> str:
    """The schedule occurrence this timer invocation stands for (ISO UTC), the same on every
    instance (`timerschedules.fired_occurrence`)."""
    if schedule is None:
        raise KeyTemplateError(template, "occurrence", "needs the timer's schedule= argument")
    try:
        text = resolve_placeholders(schedule)
        moment = timerschedules.fired_occurrence(text, timer.schedule_status, now)
    except (SettingMissing, timerschedules.InvalidSchedule, timerschedules.NoOccurrence) as error:
        raise KeyTemplateError(template, "occurrence", str(error)) from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
