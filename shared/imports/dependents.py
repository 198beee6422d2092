"""Who a dependent without an id of its own is: its subscriber, relationship, birth date
and first name, kept as a keyed hash, never in clear.

Employers' 834 files often identify a child only by the subscriber's REF*0F (newborns have
no SSN). Enrollment systems identify such a dependent by the subscriber's identifier
together with the dependent's relationship (INS02), birth date (2100A DMG02) and first
name (2100A NM104); this module does the same:

    identity digest   BLAKE2b-64 (8 bytes, hex) of the subscriber id, INS02, the birth date
                      (ISO) and the first name normalised (Unicode NFKD, accents dropped,
                      case folded, letters and digits only: "José-Luis" = "JOSE LUIS"),
                      joined by U+001F, personalised "834-dependent", keyed with app setting
                      IMPORT_DEPENDENT_ID_KEY when it is set (unkeyed otherwise: then the
                      digest hides the values from a reader of ids and logs, but whoever
                      knows the subscriber id can confirm a guessed birth date and name)
    member id         "{REF*0F}-{INS02}-{digest}", e.g. "A1234-19-5f0c2a9e81d3b7c4":
                      the same child in tomorrow's file has the same id, so the same row

Names and birth dates stay out of ids, keys, reports and logs; the member's row holds them,
as it holds every member's. The digest is computed from what the file says in loop 2100A;
a correction (2100B, "incorrect member": the values before the correction) also gives the
digest of the old values, so the member it corrects is found under its old id. After that
the row holds the corrected values, and the importer finds it from them
(`importer._resolve_dependent`: the subscriber's dependents are read and compared by
digest), so a correction never makes a second member.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from datetime import date

PERSON = b"834-dependent"
SEPARATOR = "\x1f"


def normal_name(name: str) -> str:
    """A first name as compared: accents dropped, case folded, letters and digits only."""
    decomposed = unicodedata.normalize("NFKD", name)
    return "".join(ch for ch in decomposed.casefold() if ch.isalnum())


def identity_digest(
    subscriber_id: str, relationship: str, birth: date, first_name: str, key: bytes = b""
) -> str:
    """The dependent's identity digest (16 hex characters); see the module docstring."""
    text = SEPARATOR.join((subscriber_id.strip(), relationship.strip(), birth.isoformat(),
                           normal_name(first_name)))  # fmt: skip
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=key, person=PERSON).hexdigest()


def derived_member_id(subscriber_id: str, relationship: str, digest: str) -> str:
    return f"{subscriber_id.strip()}-{relationship.strip()}-{digest}"


@dataclass(frozen=True)
class DependentKey:
    """How to find a dependent that has no id of its own (carried by its `Change`).

    `digests`: its identity digest from 2100A first, then (a 2100B correction) the digest
    of the values before the correction. Its `Change.member_id` is the first one's id."""

    subscriber_id: str
    relationship: str
    digests: tuple[str, ...]

    def member_ids(self) -> list[str]:
        return [derived_member_id(self.subscriber_id, self.relationship, d) for d in self.digests]
