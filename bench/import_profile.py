"""One 834 import of N generated members, in this process, timed (and optionally profiled).

`python -m bench.import_profile 20000 [--profile]`: a private in-memory Azurite, the file
uploaded, then `run_import` invocation after invocation until the run completes; prints
members/s, wall and this process's CPU seconds (less sensitive to a loaded machine than
wall time), and with `--profile` cProfile's top functions. How the 834 reader's speed-ups
were measured (before and after, same command on both trees).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from datetime import date
from pathlib import Path

from bench._storage import azurite_storage
from bench.import_e2e import edi_file


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("members", type=int)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with azurite_storage(in_memory=True) as _:
        os.environ.update({"IMPORTS_CONTAINER": "p-imports", "MEMBERS_TABLE": "PMembers",
                           "LEASE_CONTAINER": "p-locks"})  # fmt: skip
        from blobsingleton import BlobLease

        from shared.imports.importer import run_import
        from shared.imports.layout import imports_container
        from shared.imports.request import ImportRequest

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "a.834"
            size = edi_file(path, args.members)
            with path.open("rb") as data:
                imports_container(create=True).upload_blob("acc/incoming/a.834", data,
                                                           length=size)  # fmt: skip
        profile = cProfile.Profile() if args.profile else None
        started, cpu, invocations = time.perf_counter(), time.process_time(), 0
        if profile is not None:
            profile.enable()
        while True:
            with BlobLease("import-acc") as lease:
                report = run_import(ImportRequest.nightly("acc", date(2026, 11, 22)),
                                    lease.token, email=False)  # fmt: skip
            invocations += 1
            if report.status != "continued":
                break
        if profile is not None:
            profile.disable()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"members={args.members} imported={report.imported} invocations={invocations} "
              f"seconds={seconds:.1f} members/s={args.members / seconds:.1f} "
              f"process_cpu_s={cpu:.1f}")  # fmt: skip
        if profile is not None:
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(40)
            stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
