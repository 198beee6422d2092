"""An 834's family rules: member ids within a family, and the caps on what the reader holds.

A family is a subscriber loop and the dependent loops after it; dependents sent without
their subscriber (a newborn added on its own) form a family with the dependents after them
that carry the same REF*0F. A dependent's id depends on its siblings (`resolve_ids`), so a
family is held until it ends: memory is one family. Caps (`ReadLimits`, from the app
settings): at most IMPORT_MAX_FAMILY_DEPENDENTS dependents (`Families`: beyond, every
member of the family is rejected, category FAMILY_SIZE, each as it is read, with a resume
point of its own); each loop at most IMPORT_MAX_LOOP_SEGMENTS segments (`members`).

Imports `members` (the loops it groups) and the app's records, config and dependents.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shared.imports.config import DEFAULT_MAX_FAMILY_DEPENDENTS, DEFAULT_MAX_LOOP_SEGMENTS
from shared.imports.dependents import DependentKey, derived_member_id, identity_digest, normal_name
from shared.imports.records import SourceRecord
from shared.imports.x12.members import MemberLoop

#: The record category of a member of a family over IMPORT_MAX_FAMILY_DEPENDENTS (the report
#: counts rejections by category).
FAMILY_SIZE = "family_size"


@dataclass(frozen=True)
class ReadLimits:
    """The reader's caps (app settings, `config.ImportSettings`) and the key of dependents'
    identity digests."""

    max_family_dependents: int = DEFAULT_MAX_FAMILY_DEPENDENTS
    max_loop_segments: int = DEFAULT_MAX_LOOP_SEGMENTS
    id_key: bytes = field(default=b"", repr=False)


def resolve_ids(family: list[MemberLoop], key: bytes = b"") -> None:
    """Member ids of one family (a subscriber loop and the dependent loops after it).

    subscriber (INS01=Y): REF*0F, the subscriber identifier the guide requires.
    dependent (INS01=N), the first that applies:
      1. its own REF*0F when it differs from the subscriber's (the sender identifies each
         member there);
      2. REF*23 (client number);
      3. NM109 when NM108 is ZZ (a mutually defined member id); never an SSN (NM108=34);
      4. its identity (`dependents.py`): its REF*0F (the subscriber's id), INS02, birth date
         and first name, hashed: "{REF*0F}-{INS02}-{digest}". Two dependents of the family
         with the same identity (twins with one name, or one child sent twice) cannot be
         told apart: both are rejected, never merged into one member. A dependent without
         a birth date (DMG02) or a first name (NM104) cannot be identified: rejected.
    `key`: IMPORT_DEPENDENT_ID_KEY.
    """
    subscriber = next((m for m in family if m.subscriber), None)
    family_id = subscriber.ref_0f if subscriber is not None else ""
    derived: dict[str, list[MemberLoop]] = {}
    for member in family:
        if member.subscriber:
            member.member_id = member.ref_0f
            if not member.member_id:
                member.id_error = "member_id: a subscriber (INS01=Y) needs REF*0F"
        elif subscriber is not None and member.ref_0f and member.ref_0f != family_id:
            member.member_id = member.ref_0f
        elif member.refs.get("23"):
            member.member_id = member.refs["23"]
        elif member.nm108 == "ZZ" and member.nm109:
            member.member_id = member.nm109
        elif member.ref_0f and member.relationship:
            _identify(member, key)
            if member.dependent is not None:
                derived.setdefault(member.dependent.digests[0], []).append(member)
        else:
            member.id_error = ("member_id: a dependent (INS01=N) needs REF*0F with INS02, "
                               "REF*23 or NM109 (NM108=ZZ)")  # fmt: skip
    for same in derived.values():
        if len(same) > 1:
            for member in same:
                member.id_error = (
                    f"member_id: {len(same)} dependents of one subscriber with relationship "
                    f"INS02={member.relationship}, the same birth date and the same first name, "
                    "and no id of their own (REF*23, NM109 with NM108=ZZ), cannot be told "
                    "apart (twins with one name?): the sender must identify them"
                )


def _identify(member: MemberLoop, key: bytes) -> None:
    """A dependent's id from its identity (see `resolve_ids`, rule 4)."""
    first = member.first_name if member.first_name and normal_name(member.first_name) else None
    missing = [
        name
        for name, value in (
            ("birth date (2100A DMG02)", member.birth),
            ("first name (2100A NM104)", first),
        )
        if value is None
    ]
    if member.birth is None or first is None:
        member.id_error = (
            "member_id: a dependent with no id of its own (REF*23, NM109 with NM108=ZZ) is "
            "identified by its subscriber's REF*0F, INS02, birth date and first name; this "
            "one has no " + " and no ".join(missing)
        )
        return
    subscriber, relationship = member.ref_0f, member.relationship
    digests = [identity_digest(subscriber, relationship, member.birth, first, key)]
    if member.corrected:
        before = identity_digest(subscriber, relationship, member.previous_birth or member.birth,
                                 member.previous_first_name or first, key)  # fmt: skip
        if before != digests[0]:
            digests.append(before)
    member.dependent = DependentKey(subscriber, relationship, tuple(digests))
    member.member_id = derived_member_id(subscriber, relationship, digests[0])


class Families:
    """Groups member loops into families as they end, and yields their records.

    A family is a subscriber loop and the dependent loops after it; dependents sent without
    their subscriber (a newborn added on its own) form a family with the dependents after
    them that carry the same REF*0F. A family is held until it ends (a dependent's id
    depends on its siblings: `resolve_ids`), so memory is one family. A family with more
    than `max_family_dependents` dependents is not held: all of its members are rejected,
    those held at once and every later one as it ends; its records then carry a resume
    point each (with the family's state), so even a huge family checkpoints."""

    def __init__(self, limits: ReadLimits, saved: dict[str, Any] | None) -> None:
        self.limits = limits
        self.loops: list[MemberLoop] = []
        self.key = ""  # REF*0F of a family without a subscriber
        self.subscriber = False
        self.dependents = 0
        self.overflow = False
        if saved:  # resumed inside a family over its cap
            self.overflow, self.key = True, str(saved.get("key") or "")
            self.subscriber, self.dependents = bool(saved.get("subscriber")), int(saved["size"])

    def _joins(self, loop: MemberLoop) -> bool:
        if loop.subscriber or not (self.loops or self.overflow):
            return False
        return self.subscriber or loop.ref_0f == self.key

    def _too_big(self) -> str:
        return (f"family: more than {self.limits.max_family_dependents} dependents in one "
                "family (IMPORT_MAX_FAMILY_DEPENDENTS): every member of the family is "
                "rejected")  # fmt: skip

    def _overflow_point(self, point: dict[str, Any] | None) -> dict[str, Any] | None:
        if point is None:
            return None
        state = {"key": self.key, "subscriber": self.subscriber, "size": self.dependents}
        return {**point, "family": state}

    def loop_ended(
        self, loop: MemberLoop, next_point: dict[str, Any] | None
    ) -> Iterator[SourceRecord]:
        """`loop` has ended; `next_point`: where a read could resume after it (before the
        next INS), or None."""
        if self._joins(loop):
            self.dependents += 1
            if self.overflow:
                yield loop.record(resume=self._overflow_point(next_point), error=self._too_big(),
                                  category=FAMILY_SIZE)  # fmt: skip
                return
            self.loops.append(loop)
            if self.dependents > self.limits.max_family_dependents:
                self.overflow = True
                held, self.loops = self.loops, []
                for member in held[:-1]:
                    yield member.record(error=self._too_big(), category=FAMILY_SIZE)
                yield held[-1].record(resume=self._overflow_point(next_point),
                                      error=self._too_big(), category=FAMILY_SIZE)  # fmt: skip
            return
        yield from self.end(loop.start)
        self.loops, self.subscriber, self.key = [loop], loop.subscriber, loop.ref_0f
        self.dependents = 0 if loop.subscriber else 1

    def end(self, resume: dict[str, Any] | None = None) -> Iterator[SourceRecord]:
        """The family ends (before a loop of another family, `resume` pointing there; or at
        the end of its transaction set, None): its records, the last one with `resume`."""
        family, self.loops = self.loops, []
        self.overflow, self.dependents, self.key, self.subscriber = False, 0, "", False
        if not family:
            return
        resolve_ids(family, self.limits.id_key)
        yield from (m.record() for m in family[:-1])
        yield family[-1].record(resume=resume)
