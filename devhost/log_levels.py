"""host.json `logging.logLevel` as the host applies it to what the worker sends.

The host files a record logged during an invocation under the category
`Function.<name>.User` and filters it by the rule with the longest matching category prefix
(`Function.<name>.User`, `Function.<name>`, `Function`), else `default` (Information when
unset). Records the worker could not tie to an invocation are filtered by `default` here.
Level names are .NET's `LogLevel` (Trace, Debug, Information, Warning, Error, Critical, None),
case-insensitive, as the host reads them; this module is the host's reading of them (the app
reads host.json for its own purposes in `shared/app_logging.py`, which devhost never imports).
"""

from __future__ import annotations

import logging

from devhost.invocation import current_function_name

#: .NET LogLevel names as Python levels (Python has no Trace: it is DEBUG); None lets nothing
#: through.
LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "information": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "none": logging.CRITICAL + 10,
}


def python_level(name: str) -> int:
    """A host.json (.NET LogLevel) level name as a Python level; ValueError for unknown ones."""
    try:
        return LEVELS[str(name).strip().lower()]
    except KeyError:
        raise ValueError(f"not a log level: {name!r} (one of {', '.join(LEVELS)})") from None


def level_for(category: str, rules: dict[str, str]) -> int:
    """The level of the most specific rule whose category is a prefix of `category`."""
    lowered = {key.lower(): value for key, value in rules.items()}
    parts = category.split(".")
    for end in range(len(parts), 0, -1):
        rule = lowered.get(".".join(parts[:end]).lower())
        if rule is not None:
            return python_level(rule)
    return python_level(lowered.get("default", "Information"))


class HostLogLevelFilter(logging.Filter):
    """Drops records below the host.json level of their category."""

    def __init__(self, rules: dict[str, str]) -> None:
        super().__init__()
        self.rules = dict(rules)
        for value in self.rules.values():
            python_level(value)  # an unknown level is an error at start-up, not at log time

    def filter(self, record: logging.LogRecord) -> bool:
        function = current_function_name()
        category = f"Function.{function}.User" if function else "default"
        return record.levelno >= level_for(category, self.rules)
