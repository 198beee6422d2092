"""Untrusted JSON bodies (queue messages, HTTP requests) parsed into a dict, or one clear error.

Every way a body can be unusable becomes `InvalidBody` with a reason that names the problem and
never quotes the body: too large, too many values, not UTF-8, not JSON, `NaN`/`Infinity`, a
duplicate field, nested deeper than any message of this app, a lone surrogate (`"\\ud800"` is
valid JSON but not Unicode text: it cannot be encoded into a blob name, a log line or an
email), or not an object. Python's own parser raises `RecursionError` at about 1,000 levels,
and a surrogate only fails later, far from the parser; both would make the host retry the
message five times.

Memory. A decoded document costs far more than its text: `[[],[],...]` is 3 bytes of text
and about 64 bytes of Python objects per element, so a 32 MiB body grew a worker by 1.5 GB.
Before anything is built, one pass walks the text once, strings skipped (regular
expressions and `bytes.count`: C speed, linear), counting the values the parser would create
and measuring the nesting. A body over `max_elements` or `MAX_DEPTH` is refused without
being decoded, so a decoded body costs at most about `max_elements` x 250 bytes beside its
text.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

#: Deeper than any message this app writes or accepts (a job unit's payload included).
MAX_DEPTH = 64
#: Values of one body when the caller names no other limit: more than a 64 KiB queue message
#: can hold (about 32,000 of the smallest, `[[],[],...]`).
DEFAULT_MAX_ELEMENTS = 50_000

#: A JSON string, matched possessively (never a backtrack into it), an unterminated one up to
#: the end of the text: every quote starts at most one match, so the pass is linear.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


class InvalidBody(ValueError):
    """The body is not a JSON object this app can use; `reason` says why.

    `field` is the offending field's name where there is one. It is sender data: a caller that
    logs it scrubs it first.
    """

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.field))

    def describe(self) -> str:
        """What is wrong, for a log line or a 400: the field's name is left out."""
        return f"body {self.reason}" if self.field is None else f"a field {self.reason}"


def _within(raw: bytes, max_elements: int) -> None:
    """Refuse `raw` if it would decode into more than `max_elements` values or nest deeper
    than MAX_DEPTH (the depth is measured only once the count is known to be small)."""
    skeleton = _STRING.sub(b'""', raw)
    values = 1 + skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{")
    if values > max_elements:
        raise InvalidBody(f"holds more than {max_elements} JSON values")
    if _depth(skeleton) > MAX_DEPTH:
        raise InvalidBody(f"is nested more than {MAX_DEPTH} levels deep")


def _depth(skeleton: bytes) -> int:
    brackets = b"".join(_BRACKETS.findall(skeleton))
    if not brackets:
        return 0
    steps = brackets.translate(_STEPS)  # "[" and "{" -> 2, "]" and "}" -> 0
    return max(accumulate(step - 1 for step in steps))


_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def _no_constant(name: str) -> Any:
    raise InvalidBody(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise InvalidBody("appears more than once in a JSON object", field=name)
            seen.add(name)
    return data


def _check_values(data: object) -> None:
    """Depth and text of every value, iteratively (a recursive walk could overflow itself)."""
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise InvalidBody(f"is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            for name, item in value.items():
                _check_text(name)
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in value)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidBody("holds a lone surrogate (\\ud800-\\udfff): not Unicode text") from None


def parse_object(
    body: bytes | str, *, max_bytes: int, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> dict[str, Any]:
    """The JSON object in `body`; `InvalidBody` for anything else (see the module's doc)."""
    if isinstance(body, str):
        _check_text(body)
        raw = body.encode("utf-8")
    else:
        raw = bytes(body)
    if len(raw) > max_bytes:
        raise InvalidBody(f"is {len(raw)} bytes, the limit is {max_bytes}")
    _within(raw, max_elements)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidBody("is not UTF-8 text") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except InvalidBody:
        raise  # a duplicate field or NaN, found by the parser's hooks
    except RecursionError:
        raise InvalidBody(f"is nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as error:
        # error.msg says what was expected; the document itself is left out on purpose.
        reason = f"is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        raise InvalidBody(reason) from None
    except ValueError as error:  # an integer of more than 4,300 digits
        raise InvalidBody(f"is not usable JSON ({str(error)[:100]})") from None
    if not isinstance(data, dict):
        raise InvalidBody(f"must be a JSON object, not {json_type(data)}")
    _check_values(data)
    return data


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    for kind, label in names.items():
        if isinstance(value, kind):
            return label
    return "number" if isinstance(value, int | float) else type(value).__name__
