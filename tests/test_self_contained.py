"""A clone of this repository is the whole product: nothing it runs reads a file beside it.

A stranger clones the repository and runs `make test` with no folder next to it. Every file the
tests, the demo and the benchmarks read must therefore live inside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness import services

ROOT = Path(__file__).resolve().parent.parent
#: Code that climbs out of the repository: a parent of the root, or a relative path upwards.
_OUTSIDE = re.compile(r"ROOT\.parent\b|parents\[\s*[3-9]\s*\]|\.\./shared\b")
_CODE = ("harness", "bench", "devhost", "tests", "shared", "functions", "packages")


def test_the_sendgrid_contract_is_kept_in_the_repository() -> None:
    spec = services.SENDGRID_SPEC.resolve()
    assert spec.is_file()
    assert spec.is_relative_to(ROOT)
    assert (spec.parent / "LICENSE").is_file() and (spec.parent / "README.md").is_file()


def test_no_code_reads_a_path_outside_the_repository() -> None:
    offenders = []
    for folder in _CODE:
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(__file__).resolve() or ".venv" in path.parts:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _OUTSIDE.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
