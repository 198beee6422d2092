"""NCrontab fields and .NET TimeSpans, parsed as the timer extension parses them (see the
package's docstring for the grammar)."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")  # fmt: skip
DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


# -- NCrontab fields ------------------------------------------------------------------------------
#: White space .NET's number parsing skips (U+0009 to U+000D and the space).
_DOTNET_SPACE = " \t\n\v\f\r"
_DOTNET_INT = re.compile(rf"[{_DOTNET_SPACE}]*([+-]?[0-9]+)[{_DOTNET_SPACE}]*")


def _dotnet_int(text: str, what: str) -> int:
    """`text` as `int.Parse(text, CultureInfo.InvariantCulture)` reads it."""
    match = _DOTNET_INT.fullmatch(text)
    if match is None:
        raise ValueError(f"{what}: {text!r} is not a number")
    value = int(match[1])
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{what}: {text!r} is out of range")
    return value


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()

    def parse(self, text: str) -> frozenset[int]:
        """The values `text` selects, by NCrontab's rules; ValueError saying why not."""
        if not text:
            raise ValueError(f"{self.name}: empty")
        values: set[int] = set()
        for part in text.split(",") if text.find(",") > 0 else [text]:
            values |= self._part(part)
        return frozenset(values)

    def _part(self, part: str) -> set[int]:
        if not part:
            raise ValueError(f"{self.name}: empty list item")
        step = None
        if part.find("/") > 0:
            part, step_text = part.split("/", 1)
            step = _dotnet_int(step_text, f"{self.name} step")
        if part == "*":
            start, end = self.low, self.high
        elif part.find("-") > 0:
            first, last = part.split("-", 1)
            start, end = sorted((self._value(first), self._value(last)))
        else:
            start = self._value(part)
            end = start if step is None else self.high
        return set(range(start, end + 1, max(1, step or 1)))

    def _value(self, text: str) -> int:
        if "0" <= text[:1] <= "9":
            value = _dotnet_int(text, self.name)
        else:
            matches = [
                i for i, name in enumerate(self.names) if name.lower().startswith(text.lower())
            ]
            if not text or not matches:
                raise ValueError(f"{self.name}: {text!r} is neither a number nor a known name")
            value = self.low + matches[0]
        if not self.low <= value <= self.high:
            raise ValueError(f"{self.name}: {value} is outside {self.low}-{self.high}")
        return value

    def cron(self, values: frozenset[int]) -> str:
        """The compact text of a value set: `*` for all, else the explicit list."""
        if values == frozenset(range(self.low, self.high + 1)):
            return "*"
        return ",".join(str(v) for v in sorted(values))

    def values(self, text: str) -> tuple[int, ...]:
        """The sorted values of a compact text written by `cron`."""
        if text == "*":
            return tuple(range(self.low, self.high + 1))
        return tuple(sorted(int(v) for v in text.split(",")))


_SECONDS = _Field("second", 0, 59)
_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day", 1, 31),
    _Field("month", 1, 12, MONTHS),
    _Field("day of week", 0, 6, DAYS),
)


def _first_at_or_after(fields: Sequence[tuple[int, ...]], target: tuple[int, ...]) -> Any:
    """The smallest tuple of `product(*fields)` >= `target` (lexicographic), or None."""
    if not fields:
        return ()
    head, rest = fields[0], fields[1:]
    i = bisect_left(head, target[0])
    if i < len(head) and head[i] == target[0]:
        tail = _first_at_or_after(rest, target[1:])
        if tail is not None:
            return (head[i], *tail)
        i += 1
    return (head[i], *(f[0] for f in rest)) if i < len(head) else None


def _last_at_or_before(fields: Sequence[tuple[int, ...]], target: tuple[int, ...]) -> Any:
    """The largest tuple of `product(*fields)` <= `target` (lexicographic), or None."""
    if not fields:
        return ()
    head, rest = fields[0], fields[1:]
    i = bisect_right(head, target[0]) - 1
    if i >= 0 and head[i] == target[0]:
        tail = _last_at_or_before(rest, target[1:])
        if tail is not None:
            return (head[i], *tail)
        i -= 1
    return (head[i], *(f[-1] for f in rest)) if i >= 0 else None


_TS_DAYS = re.compile(r"(\d+)")
_TS_DOTTED = re.compile(r"(\d+)\.(\d+):(\d+)(?::(\d+)(?:\.(\d{1,7}))?)?")
_TS_FOUR = re.compile(r"(\d+):(\d+):(\d+):(\d+)(?:\.(\d{1,7}))?")
_TS_CLOCK = re.compile(r"(\d+):(\d+)(?::(\d+)(?:\.(\d{1,7}))?)?")


def parse_timespan(text: str) -> timedelta | None:
    """`text` as .NET's `TimeSpan.Parse` reads it, or None when it is not a TimeSpan."""
    text = text.strip()
    negative = text.startswith("-")
    body = text[1:] if negative else text
    parsed = _timespan_parts(body)
    if parsed is None:
        return None
    days, hours, minutes, seconds, fraction = parsed
    if hours > 23 or minutes > 59 or seconds > 59:
        return None  # .NET: OverflowException
    value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds,
                      microseconds=int((fraction or "0").ljust(7, "0")[:7]) / 10)  # fmt: skip
    return -value if negative else value


def _timespan_parts(body: str) -> tuple[int, int, int, int, str | None] | None:
    if match := _TS_DAYS.fullmatch(body):
        return int(match[1]), 0, 0, 0, None
    if match := _TS_DOTTED.fullmatch(body):
        return int(match[1]), int(match[2]), int(match[3]), int(match[4] or 0), match[5]
    if match := _TS_FOUR.fullmatch(body):
        return int(match[1]), int(match[2]), int(match[3]), int(match[4]), match[5]
    if match := _TS_CLOCK.fullmatch(body):
        hours, minutes, seconds = int(match[1]), int(match[2]), int(match[3] or 0)
        if hours > 23 and match[3] is not None and match[4] is None:
            return hours, minutes, seconds, 0, None  # "24:00:00" is 24 days, as .NET reads it
        return 0, hours, minutes, seconds, match[4]
    return None
