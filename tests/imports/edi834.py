"""Small X12 834 interchanges for the rule tests, and the real public files under data/real834."""

from __future__ import annotations

from pathlib import Path

from shared.imports.records import SourceRecord
from shared.imports.text_stream import ChunkedText
from shared.imports.x12.members import FileFacts
from shared.imports.x12.reader import check_envelope, read_834

REAL = Path(__file__).parent / "data" / "real834"


def real(name: str) -> bytes:
    return (REAL / name).read_bytes()


def transaction_set(number: int, members: list[str], *, file_date: str = "") -> list[str]:
    """ST..SE around member segments (each "INS*..." etc. without terminator)."""
    body = [
        f"ST*834*{number:04d}*005010X220A1",
        f"BGN*00*RULES{number:04d}*20260401*1200****2",
        *([f"DTP*007*D8*{file_date}"] if file_date else []),
        "N1*P5*RULES SPONSOR*FI*123456789",
        "N1*IN*RULES PAYER*FI*987654321",
        *members,
    ]
    return [*body, f"SE*{len(body) + 1}*{number:04d}"]


def interchange(*sets: list[str], file_date: str = "") -> bytes:
    isa = (
        "ISA*00*          *00*          *ZZ*RULESSENDER    *ZZ*RULESRECEIVER  *"
        "260401*1200*^*00501*000000001*0*P*:"
    )
    segments = [isa, "GS*BE*RULESSENDER*RULESRECEIVER*20260401*1200*1*X*005010X220A1"]
    for number, members in enumerate(sets, start=1):
        segments += transaction_set(number, members, file_date=file_date)
    segments += [f"GE*{len(sets)}*1", "IEA*1*000000001"]
    return ("~\n".join(segments) + "~\n").encode()


def subscriber(member_id: str, maintenance: str = "021", *extra: str, dmg: str = "19800515",
               coverages: tuple[str, ...] = ("HD*021**HLT*GOLD*EMP", "DTP*348*D8*20260101")
               ) -> list[str]:  # fmt: skip
    return [
        f"INS*Y*18*{maintenance}*XN*A*E**FT",
        f"REF*0F*{member_id}",
        *extra,
        "NM1*IL*1*QUIXOTE*ZELDA",
        f"DMG*D8*{dmg}*F",
        *coverages,
    ]


def read(data: bytes, facts: FileFacts | None = None) -> list[SourceRecord]:
    stream = ChunkedText(data[i : i + 37] for i in range(0, len(data), 37))
    assert check_envelope(ChunkedText([data])) == []
    return list(read_834(stream, facts))


def member_loops(name: str) -> list[list[str]]:
    """The member loops (INS to the next INS or SE) of real file `name`, each as its
    segments without terminators, byte for byte as published."""
    text = real(name).decode("ascii")
    terminator = text[105]
    segments = [s.strip() for s in text.split(terminator) if s.strip()]
    loops: list[list[str]] = []
    for segment in segments:
        if segment.startswith("INS*"):
            loops.append([segment])
        elif segment.startswith(("SE*", "GE*", "IEA*")):
            break
        elif loops:
            loops[-1].append(segment)
    return loops
