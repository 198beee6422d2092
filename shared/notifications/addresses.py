"""Syntax check of email addresses, for rejecting a bad notification before it reaches SendGrid.

No maintained validator (such as `email-validator`) is a dependency of the app, so this is a
deliberately narrow, documented check of *syntax only* (no DNS, no deliverability):

- `local@domain`, ASCII only (no internationalised addresses, no SMTPUTF8);
- the local part is an RFC 5322 dot-atom: atext characters separated by single dots, no
  quoted strings, no comments, at most 64 characters;
- the domain is two or more DNS labels (letters, digits, inner hyphens, 1..63 characters
  each, at most 253 characters in all) whose last label is not all digits: no IP literals,
  no dotless hosts such as `localhost`;
- at most 254 characters in all (RFC 5321 path limit).

Every address it accepts also matches the `format: email` rule that SendGrid's OpenAPI
spec applies (ajv-formats), so a notification that passes is one the API accepts.
"""

from __future__ import annotations

import re

MAX_ADDRESS_LENGTH = 254
MAX_LOCAL_LENGTH = 64
MAX_DOMAIN_LENGTH = 253

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LOCAL = re.compile(rf"{_ATEXT}+(?:\.{_ATEXT}+)*")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")

_PART = r"[^\s@<>\"'(),;:]"
#: Loose pattern for scrubbing anything address-like out of text that will be logged. A match
#: starts only where a run of address characters starts (the lookbehind) and takes the run
#: possessively, so text without an "@" costs one pass, not one pass per character (the
#: plain `[^...]+@` tried every start again: quadratic on a long error body).
ADDRESS_LIKE = re.compile(rf"(?<!{_PART}){_PART}++@{_PART}++")


def is_valid_address(value: object) -> bool:
    """True when `value` is a string holding one syntactically valid address (see module doc)."""
    if not isinstance(value, str) or len(value) > MAX_ADDRESS_LENGTH or not value.isascii():
        return False
    local, at, domain = value.rpartition("@")
    if not at or len(local) > MAX_LOCAL_LENGTH or len(domain) > MAX_DOMAIN_LENGTH:
        return False
    if not _LOCAL.fullmatch(local):
        return False
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return False
    return not labels[-1].isdigit()


def scrub_addresses(text: str) -> str:
    """`text` with everything that looks like an email address replaced by `<address>`."""
    return ADDRESS_LIKE.sub("<address>", text)
