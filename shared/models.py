"""Message bodies declared as models: one pydantic model per kind of message, parsed once.

Every body from a queue or an HTTP request reaches its model through `MessageModel.parse`:

1. `shared.json_body.parse_object` first, with the kind's `max_bytes` and `max_elements`: a
   body too large, too many values, nested too deep, not UTF-8, not JSON or not an object is
   refused before any model sees it (hostile input bounded before pydantic builds anything);
2. then the model validates the decoded object (`strict`: no `"5"` for 5, no `true` for 1),
   every field at once, and the caller gets the model or one `InvalidMessage` listing each
   problem as a path (`units[3].id`) and a reason.

A reason names the field and the rule, never the value: bodies carry names, addresses and
birth dates. pydantic's own messages quote no input, its `str(ValidationError)` would
(`input_value=...`): `hide_input_in_errors` keeps it out, and reasons are built from each
error's type and context alone (`problems_of`), the value's JSON type and length at most. A
field name the sender made up (an unknown field, a duplicate) is quoted only when it looks like
one (`field_name`).

Constructing a model directly (a producer: `Notification(event_id=..., ...)`) validates it the
same way and raises pydantic's `ValidationError`, its input hidden too: a bug of the app's own,
not a message to poison. (A custom `__init__` that translated it would also run inside
`model_validate`, pydantic calling it there, so the kind's error is raised by `parse` and
`from_data` only.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from shared.json_body import DEFAULT_MAX_ELEMENTS, InvalidBody, json_type, parse_object

#: A field name shown in a reason: what a schema's names look like, at most 64 characters.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
#: What a value must be, by pydantic's error type (strict mode).
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "tuple_type": "an array",
    "none_required": "null",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a body: where (a JSON path, "" for the body as a whole) and why."""

    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}

    def describe(self) -> str:
        return f"{self.field}: {self.message}" if self.field else f"body {self.message}"


class InvalidMessage(ValueError):
    """A body that is not a valid message of its kind; `problems` say where and why."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(p.describe() for p in problems))
        self.problems = list(problems)


def rule(reason: str) -> PydanticCustomError:
    """The error a field's own check raises: `reason` is the message, as it is."""
    return PydanticCustomError("app_rule", reason)


def at(loc: tuple[int | str, ...], reason: str) -> InitErrorDetails:
    """A problem of the field at `loc`, found by a check of the whole model or list (raised
    with `raise_together`)."""
    return InitErrorDetails(type=rule(reason), loc=loc, input=None)


def fail_at(loc: tuple[int | str, ...], reason: str) -> NoReturn:
    """Raise a problem of the field at `loc` from a check of the whole model."""
    raise ValidationError.from_exception_data("message", [at(loc, reason)])


def field_name(name: object) -> str:
    """A field name the sender chose, fit for an error message: quoted when it looks like a
    field name (a typo such as 'htm'), else not shown: a name can hold anything, an address
    or a person's name too."""
    text = str(name)
    if _NAME.fullmatch(text):
        return repr(text)
    return "<a field name not shown>"


def path_of(loc: Iterable[int | str]) -> str:
    """`("units", 3, "id")` -> `units[3].id`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def reason_of(error: ErrorDetails) -> str:
    """What is wrong, in the app's words, from the error's type and context only."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return "is missing"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}, not {json_type(value)}"
    if kind in ("string_too_long", "too_long") and isinstance(value, str):
        return f"is {len(value)} characters long, the limit is {ctx['max_length']}"
    if kind == "too_long":
        return f"has {ctx['actual_length']} items, the limit is {ctx['max_length']}"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    # The checks' own reasons (`rule`), or pydantic's message: neither quotes the input.
    return error["msg"]


def problems_of(error: ValidationError) -> list[Problem]:
    """Each of pydantic's errors as a `Problem`; an unknown field is named by `field_name`."""
    found: list[Problem] = []
    for detail in error.errors(include_url=False, include_context=True):
        loc = detail["loc"]
        if detail["type"] == "extra_forbidden" and loc:
            head = path_of(loc[:-1])
            name = field_name(loc[-1])
            found.append(Problem(f"{head}.{name}" if head else name, reason_of(detail)))
        else:
            found.append(Problem(path_of(loc), reason_of(detail)))
    return found


def body_problem(error: InvalidBody) -> Problem:
    """`json_body`'s refusal as a problem: of the body, or of a (duplicated) field."""
    return Problem("" if error.field is None else field_name(error.field), error.reason)


def raise_together(error: ValidationError | None, more: list[InitErrorDetails]) -> None:
    """Raise `error`'s problems and `more` as one ValidationError (nothing if neither has
    any): a check across items reported beside the items' own problems."""
    if error is None and not more:
        return
    details: list[InitErrorDetails] = []
    for d in error.errors(include_url=False) if error is not None else []:
        kind = rule(d["msg"]) if d["type"] == "app_rule" else d["type"]
        details.append(InitErrorDetails(type=kind, loc=d["loc"], input=d["input"],
                                        ctx=d.get("ctx") or {}))  # fmt: skip
    raise ValidationError.from_exception_data("message", [*details, *more])


class MessageModel(BaseModel):
    """The base of every message model: frozen, strict, unknown fields refused (a model that
    tolerates them says so), inputs never in error text, the body bound by class."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", hide_input_in_errors=True)

    #: What this kind raises for a body that can never be valid (`invalid` builds it).
    error: ClassVar[type[Exception]] = InvalidMessage
    #: The bound in front of the parser (shared.json_body): bytes, then JSON values.
    max_bytes: ClassVar[int] = 64 * 1024
    max_elements: ClassVar[int] = DEFAULT_MAX_ELEMENTS

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        """This kind's `error` for `problems` (its callers catch it)."""
        return InvalidMessage(problems)

    @classmethod
    def from_data(cls, data: object, *, context: dict[str, Any] | None = None) -> Self:
        """The model of an already decoded body; the kind's error if it is not one."""
        try:
            return cls.model_validate(data, context=context)
        except ValidationError as error:
            raise cls.invalid(problems_of(error)) from None

    @classmethod
    def decode(cls, body: bytes | str) -> dict[str, Any]:
        """Step 1: the JSON object of a raw body, within this kind's bound; the kind's error
        if it is none."""
        try:
            return parse_object(body, max_bytes=cls.max_bytes, max_elements=cls.max_elements)
        except InvalidBody as error:
            raise cls.invalid([body_problem(error)]) from None

    @classmethod
    def parse(cls, body: bytes | str, *, context: dict[str, Any] | None = None) -> Self:
        """The model of a raw body, bounded first (see the module's doc)."""
        return cls.from_data(cls.decode(body), context=context)
