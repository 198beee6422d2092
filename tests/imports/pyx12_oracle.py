"""pyx12 as published, in a process of its own: the oracle the 834 tests compare with.

The test process has the reader's speed-ups installed in pyx12 (`speedups.install()`, as
the importer does when a run starts; tests/imports/conftest.py). An oracle read there would
run on the patched pyx12 and prove nothing about the patches. So the oracle runs in a child
process (`python -m tests.imports.pyx12_oracle`) that never calls `install()`, and every
answer carries `pristine()`, read in the child from pyx12's own modules, which the client
asserts. Requests are JSON lines on the child's stdin, answers JSON lines on its stdout:

    {"op": "ack", "data": <base64>}    pyx12's own validation (`x12n_document`): its 999/997
    {"op": "read", "data": <base64>}   the app's reader (both passes) on unpatched pyx12
"""

from __future__ import annotations

import base64
import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def pristine() -> dict[str, bool]:
    """Whether each name the speed-ups replace is pyx12's own, read from where pyx12
    defines it (not from the app's bookkeeping)."""
    import pyx12.map_if._segment
    import pyx12.map_walker
    import pyx12.nodeCounter
    import pyx12.segment
    import pyx12.x12context

    refdes = vars(pyx12.segment.Segment)["_parse_refdes"]
    return {
        "apply_segment_errors": (
            pyx12.x12context.apply_segment_errors is pyx12.map_if._segment.apply_segment_errors
        ),
        "_parse_refdes": refdes.__module__ == "pyx12.segment"
        and refdes.__qualname__ == "Segment._parse_refdes",
        "NodeCounter": pyx12.map_walker.NodeCounter is pyx12.nodeCounter.NodeCounter,
    }


def pyx12_ack(data: bytes) -> str:
    """pyx12's own validation of `data` (`x12n_document`), as the 999 (997) it writes."""
    import pyx12.params
    import pyx12.x12n_document

    out = io.StringIO()
    logging.getLogger("pyx12").disabled = True  # it logs the bad values it finds
    try:
        pyx12.x12n_document.x12n_document(
            pyx12.params.params(), io.StringIO(data.decode("ascii")), out, None
        )
    finally:
        logging.getLogger("pyx12").disabled = False
    return out.getvalue()


def reader_outcome(data: bytes) -> list[str]:
    """What the reader makes of `data`: the envelope pass's problems, then each member
    record (number, error, member id, change) or the file error; as text, to compare."""
    from shared.imports.records import SourceFileError
    from shared.imports.text_stream import ChunkedText
    from shared.imports.x12.reader import check_envelope, read_834

    found = [repr(check_envelope(ChunkedText([data])))]
    try:
        found += [repr((r.number, r.error, r.member_id, r.change))
                  for r in read_834(ChunkedText([data]))]  # fmt: skip
    except SourceFileError as error:
        found.append(repr(("file error", str(error))))
    return found


def _serve() -> None:
    # the reader's every module imported, as in the app; `install()` never called
    import shared.imports.x12.reader
    import shared.imports.x12.speedups  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        data = base64.b64decode(request["data"])
        answer: Any = pyx12_ack(data) if request["op"] == "ack" else reader_outcome(data)
        print(json.dumps({"answer": answer, "pristine": pristine()}), flush=True)


class Oracle:
    """The client: one child process for the session, asked one request at a time."""

    def __init__(self) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "tests.imports.pyx12_oracle"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.last_pristine: dict[str, bool] = {}

    def _ask(self, op: str, data: bytes) -> Any:
        assert self._child.stdin is not None and self._child.stdout is not None
        request = {"op": op, "data": base64.b64encode(data).decode("ascii")}
        self._child.stdin.write(json.dumps(request) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        assert line, f"the pyx12 oracle exited ({self._child.poll()})"
        reply = json.loads(line)
        self.last_pristine = reply["pristine"]
        assert all(self.last_pristine.values()), f"the oracle's pyx12 is patched: {reply}"
        return reply["answer"]

    def ack(self, data: bytes) -> str:
        """pyx12's own 999 (997) of `data`, from unpatched pyx12."""
        return str(self._ask("ack", data))

    def read(self, data: bytes) -> list[str]:
        """`reader_outcome(data)` on unpatched pyx12."""
        return list(self._ask("read", data))

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(timeout=60)
        if self._child.stdout is not None:
            self._child.stdout.close()


if __name__ == "__main__":
    _serve()
