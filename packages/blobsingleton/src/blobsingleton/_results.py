"""What a duplicate of an `@once` call gets back: the first call's result, stored by a codec
(`DefaultCodec`, or the function's own) and rebuilt fresh (`Results`) (docs/internals.md)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import importlib
import math
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

from blobsingleton.errors import ResultNotStorable

TAG = "$t"
_SCALARS = (str, int, bool, type(None))  # exact types (see `encode`)
_TIMES: dict[str, type] = {"datetime": dt.datetime, "date": dt.date, "time": dt.time}
#: Rebuilds one tagged value; its parts through the second argument (the codec's `decode`).
_Decoder = Callable[[dict[str, Any], Callable[[Any], Any]], Any]


class ResultCodec(Protocol):
    """A `@once(result=...)` codec: `encode` gives JSON-able data, `decode` the value back."""

    def encode(self, result: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


class Unstorable(Exception):
    """Internal: a value the default codec cannot store (its type is `kind`)."""

    def __init__(self, kind: type) -> None:
        super().__init__(kind.__qualname__)
        self.kind = kind


def _class_path(cls: type) -> str:
    if "<locals>" in cls.__qualname__:
        raise Unstorable(cls)  # cannot be imported again
    return f"{cls.__module__}:{cls.__qualname__}"


def _import(path: str) -> Any:
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _http_response_class() -> Any:
    try:
        return importlib.import_module("azure.functions").HttpResponse
    except ImportError:  # pragma: no cover - the worker's SDK is not installed
        return None


def encode(value: Any, part: Callable[[Any], Any]) -> Any:
    """`value` as JSON-able data, its parts through `part` (the codec's own `encode`, so a
    subclass's types are found nested too); `Unstorable` for a type this codec cannot store
    (types are matched exactly: a subclass of str, dict or list would come back as its base)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, enum.Enum):
        return {TAG: "enum", "cls": _class_path(kind), "v": part(value.value)}
    if kind is float:
        return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
    if kind is list:
        return [part(item) for item in value]
    if kind is dict:
        if all(type(k) is str for k in value) and TAG not in value:
            return {k: part(v) for k, v in value.items()}
        return {TAG: "dict", "v": [[part(k), part(v)] for k, v in value.items()]}
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return {TAG: "namedtuple", "cls": _class_path(kind), "v": [part(i) for i in value]}
    for tag, exact in (("tuple", tuple), ("frozenset", frozenset), ("set", set)):
        if kind is exact:
            return {TAG: tag, "v": [part(item) for item in value]}
    if kind is Decimal:
        return {TAG: "decimal", "v": str(value)}
    for tag, time_kind in _TIMES.items():
        if kind is time_kind:
            return {TAG: tag, "v": value.isoformat()}
    if kind is dt.timedelta:
        return {TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if kind is uuid.UUID:
        return {TAG: "uuid", "v": str(value)}
    if kind in (bytes, bytearray):
        return {TAG: kind.__name__, "v": base64.b64encode(value).decode("ascii")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: part(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {TAG: "dataclass", "cls": _class_path(type(value)), "v": fields}
    if callable(getattr(value, "model_dump", None)) and hasattr(type(value), "model_validate"):
        dumped = value.model_dump(mode="json")
        return {TAG: "model", "cls": _class_path(type(value)), "v": dumped}
    response = _http_response_class()
    if response is not None and isinstance(value, response):
        return {
            TAG: "http",
            "status": value.status_code,
            "headers": [[k, v] for k, v in value.headers.items()],
            "mimetype": value.mimetype,
            "charset": value.charset,
            "body": base64.b64encode(value.get_body()).decode("ascii"),
        }
    raise Unstorable(type(value))


def decode(data: Any, part: Callable[[Any], Any]) -> Any:
    """New objects from what `encode` stored, its parts through `part` (as for `encode`)."""
    if isinstance(data, list):
        return [part(item) for item in data]
    if not isinstance(data, dict):
        return data
    tag = data.get(TAG)
    if tag is None:
        return {k: part(v) for k, v in data.items()}
    return _DECODERS[tag](data, part)


def _dataclass(data: dict[str, Any], part: Callable[[Any], Any]) -> Any:
    cls: Any = _import(data["cls"])
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{data['cls']} is no longer a dataclass")
    values = {name: part(value) for name, value in data["v"].items()}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    make: Callable[..., Any] = cls
    instance = make(**{n: v for n, v in values.items() if fields[n].init})
    for name, value in values.items():
        if not fields[name].init:
            object.__setattr__(instance, name, value)
    return instance


def _http(data: dict[str, Any], _: Callable[[Any], Any]) -> Any:
    response_class = _http_response_class()
    if response_class is None:  # pragma: no cover
        raise TypeError("an HttpResponse result needs azure-functions installed")
    response = response_class(
        base64.b64decode(data["body"]), status_code=data["status"],
        mimetype=data["mimetype"], charset=data["charset"],
    )  # fmt: skip
    for name, value in data["headers"]:
        response.headers.add_header(name, value)
    return response


def _from_iso(kind: Any) -> _Decoder:
    return lambda data, _: kind.fromisoformat(data["v"])


_DECODERS: dict[str, _Decoder] = {
    "float": lambda d, part: float(d["v"]),
    "dict": lambda d, part: {part(k): part(v) for k, v in d["v"]},
    "enum": lambda d, part: _import(d["cls"])(part(d["v"])),
    "tuple": lambda d, part: tuple(part(item) for item in d["v"]),
    "namedtuple": lambda d, part: _import(d["cls"])(*(part(item) for item in d["v"])),
    "set": lambda d, part: {part(item) for item in d["v"]},
    "frozenset": lambda d, part: frozenset(part(item) for item in d["v"]),
    "decimal": lambda d, part: Decimal(d["v"]),
    "timedelta": lambda d, part: dt.timedelta(*d["v"]),
    "uuid": lambda d, part: uuid.UUID(d["v"]),
    "bytes": lambda d, part: base64.b64decode(d["v"]),
    "bytearray": lambda d, part: bytearray(base64.b64decode(d["v"])),
    "dataclass": _dataclass,
    "model": lambda d, part: _import(d["cls"]).model_validate(d["v"]),
    "http": _http,
    "ledger": lambda d, part: None,  # a timer's occurrence no run wrote (missed, skipped)
    **{tag: _from_iso(kind) for tag, kind in _TIMES.items()},
}


class DefaultCodec:
    """The codec `@once` uses unless given one (see `blobsingleton.results`). A subclass that
    adds a type overrides both methods and calls `super()` for the rest: nested values come
    back through its own methods."""

    def encode(self, result: Any) -> Any:
        return encode(result, self.encode)

    def decode(self, data: Any) -> Any:
        return decode(data, self.decode)


#: What a completion stores when its result could not be stored: duplicates raise.
UNSTORED = "unstored"


class Results:
    """One decorated function's results: `store` at completion, `replay` for a duplicate."""

    def __init__(self, function: str, codec: ResultCodec | None) -> None:
        self.function = function
        self.codec: ResultCodec = codec or DefaultCodec()

    def store(self, key: str, result: Any) -> tuple[Any, ResultNotStorable | None]:
        """The stored form of `result`, or a marker and the error the first call raises."""
        try:
            return self.codec.encode(result), None
        except Unstorable as error:
            kind = error.kind.__qualname__
        except (TypeError, ValueError) as error:  # a codec of the user's own
            kind = f"{type(result).__qualname__} ({error})"
        refused = ResultNotStorable(key, self.function, kind)
        return {TAG: UNSTORED, "type": kind}, refused

    def replay(self, key: str, stored: Any) -> Any:
        """A fresh copy of the first call's result; `ResultNotStorable` if it was not stored."""
        if isinstance(stored, dict) and stored.get(TAG) == UNSTORED:
            raise ResultNotStorable(key, self.function, str(stored.get("type")))
        return self.codec.decode(stored)
