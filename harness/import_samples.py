"""Synthetic member files for the imports scenario, tests and benchmark: CSV and X12 834.

Everything is made up and deterministic (same arguments, same bytes), so runs compare.
`bad_every=n` makes every n-th row invalid (a birth date that is not a date), so a run
has rejections to report and the expected counts are known in advance.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from shared.imports.records import FIELDS

_FIRST = ("ANA", "BEN", "CARA", "DEV", "ELI", "FAY", "GUS", "HANA", "IVO", "JUN")
_LAST = ("LEE", "NGUYEN", "SMITH", "GARCIA", "KOWALSKI", "OKAFOR", "BERG", "ROSSI")
_PLANS = ("GOLD", "SILVER", "BRONZE", "HMO-1", "PPO-2")


@dataclass(frozen=True)
class SampleMember:
    member_id: str
    first_name: str
    last_name: str
    date_of_birth: str  # YYYY-MM-DD (or something invalid on purpose)
    plan: str
    coverage_start: str
    coverage_end: str
    maintenance: str = "030"  # 834 INS03: 030 audit (full file), 021 addition, 024 termination
    eligibility_end: str = ""  # 834 DTP*357 in loop 2000, if any

    @property
    def valid(self) -> bool:
        return len(self.date_of_birth) == 10 and self.date_of_birth[4] == "-"


def members(
    count: int, *, prefix: str = "M", start: int = 0, bad_every: int = 0
) -> Iterator[SampleMember]:
    """`count` members with ids `{prefix}{number:07d}`; every `bad_every`-th one invalid."""
    for i in range(start, start + count):
        bad = bad_every > 0 and (i + 1) % bad_every == 0
        birth = f"{1940 + i % 60}-{1 + i % 12:02d}-{1 + i % 28:02d}"
        yield SampleMember(
            member_id=f"{prefix}{i:07d}",
            first_name=_FIRST[i % len(_FIRST)],
            last_name=_LAST[(i // len(_FIRST)) % len(_LAST)],
            date_of_birth="not-a-date" if bad else birth,
            plan=_PLANS[i % len(_PLANS)],
            coverage_start="2026-01-01",
            coverage_end="" if i % 3 else "2026-12-31",
        )


def csv_lines(rows: Iterator[SampleMember] | list[SampleMember]) -> Iterator[str]:
    yield ",".join(FIELDS) + "\r\n"
    for m in rows:
        yield ",".join(
            (m.member_id, m.first_name, m.last_name, m.date_of_birth, m.plan,
             m.coverage_start, m.coverage_end)
        ) + "\r\n"  # fmt: skip


def csv_bytes(rows: Iterator[SampleMember] | list[SampleMember]) -> bytes:
    return "".join(csv_lines(rows)).encode("utf-8")


def _d8(iso: str) -> str:
    return iso.replace("-", "") if len(iso) == 10 and iso[4] == "-" else iso


def edi_segments(rows: Iterator[SampleMember] | list[SampleMember]) -> list[str]:
    """The segments of one 005010X220A1 834 transaction set, ST to SE (no terminators)."""
    body = [
        "BGN*00*IMPORT0001*20260101*0200****2",
        "N1*P5*SAMPLE SPONSOR*FI*123456789",
        "N1*IN*SAMPLE PAYER*FI*987654321",
    ]
    for m in rows:
        body += [
            f"INS*Y*18*{m.maintenance}*XN*A*E**FT",
            f"REF*0F*{m.member_id}",
            *([f"DTP*357*D8*{_d8(m.eligibility_end)}"] if m.eligibility_end else []),
            f"NM1*IL*1*{m.last_name}*{m.first_name}",
            f"DMG*D8*{_d8(m.date_of_birth)}*F",
            f"HD*030**HLT*{m.plan}",
            f"DTP*348*D8*{_d8(m.coverage_start)}",
        ]
        if m.coverage_end:
            body.append(f"DTP*349*D8*{_d8(m.coverage_end)}")
    segments = ["ST*834*0001*005010X220A1", *body]
    segments.append(f"SE*{len(segments) + 1}*0001")
    return segments


def edi_bytes(rows: Iterator[SampleMember] | list[SampleMember], *, control: int = 1) -> bytes:
    """A complete, valid X12 834 interchange (ISA..IEA) for `rows`."""
    isa = (
        "ISA*00*          *00*          *ZZ*SAMPLESENDER   *ZZ*SAMPLERECEIVER *"
        f"260101*0200*^*00501*{control:09d}*0*P*:"
    )
    segments = [
        isa,
        f"GS*BE*SAMPLESENDER*SAMPLERECEIVER*20260101*0200*{control}*X*005010X220A1",
        *edi_segments(rows),
        f"GE*1*{control}",
        f"IEA*1*{control:09d}",
    ]
    return ("~\n".join(segments) + "~\n").encode("ascii")


# -- junk: what a sender's broken export or a wrong file looks like -------------------------


def junk_csv_short_lines(size: int) -> bytes:
    """The header, then `a` lines up to `size` bytes: every line a reject (wrong column
    count), 2 bytes of input each."""
    header = (",".join(FIELDS) + "\n").encode("ascii")
    return header + b"a\n" * max(0, (size - len(header)) // 2)


def junk_csv_unterminated_quote(size: int) -> bytes:
    """A row whose quote never closes, then `a` lines up to `size` bytes: the quoted field
    runs to the csv module's field limit, then every line is a reject."""
    header = (",".join(FIELDS) + "\n").encode("ascii")
    head = header + b'M1,"never closed,X,1980-01-01,GOLD,2026-01-01,\n'
    return head + b"a\n" * max(0, (size - len(head)) // 2)


def junk_csv_quotes(size: int) -> bytes:
    """Lines of one quote each up to `size` bytes: every field spans lines to the limit."""
    header = (",".join(FIELDS) + "\n").encode("ascii")
    return header + b'"\n' * max(0, (size - len(header)) // 2)


def junk_834_loops(size: int) -> bytes:
    """A valid interchange of audit (030) member loops whose birth dates are junk: every
    loop a reject (an element error pyx12 finds, acknowledged in the 999), about 70 bytes of
    input each, up to `size` bytes."""
    loops: list[str] = []
    for i in range(max(1, (size - 400) // 70)):
        loops += ["INS*Y*18*030*XN*A*E**FT", f"REF*0F*J{i:07d}", "NM1*IL*1*JUNK*JUNK",
                  "DMG*D8*NOTADATE*F"]  # fmt: skip
    return _interchange_of(loops)


def junk_834_noise(size: int) -> bytes:
    """A readable ISA, then segments of noise up to `size` bytes (no GS, ST, IEA)."""
    head = edi_bytes([]).split(b"~\n", 1)[0] + b"~\n"
    return head + b"XX*1~\n" * max(0, (size - len(head)) // 6)


def _interchange_of(body: list[str], control: int = 1) -> bytes:
    """`edi_bytes` with the member loops given as segments."""
    whole = edi_bytes([], control=control).decode("ascii").split("~\n")
    at = whole.index("N1*IN*SAMPLE PAYER*FI*987654321") + 1
    st = whole[whole.index("ST*834*0001*005010X220A1") : at]
    segments = [*whole[:2], *st, *body, f"SE*{len(st) + len(body) + 1}*0001", *whole[-3:-1]]
    return ("~\n".join(segments) + "~\n").encode("ascii")
