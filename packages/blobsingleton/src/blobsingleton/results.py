"""How `@once` stores a result for its duplicates, for a codec of your own.

The default (`DefaultCodec`) stores JSON values as they are and rebuilds `Decimal`,
`datetime`, `date`, `time`, `timedelta`, `UUID`, `bytes`, tuples, sets, dicts with other keys
than strings, `Enum` members, named tuples, dataclasses, pydantic models and
`azure.functions.HttpResponse` as they were; every replay is a new object. For another type,
pass `@once(result=codec)`: any object with `encode(result) -> JSON value` and
`decode(data) -> result` (`ResultCodec`); subclass `DefaultCodec` to add a type."""

from blobsingleton._results import DefaultCodec, ResultCodec

__all__ = ["DefaultCodec", "ResultCodec"]
