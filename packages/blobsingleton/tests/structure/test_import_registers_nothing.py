"""Importing the library registers nothing with the interpreter (issue 40, item 5): no atexit
hook, no `multiprocessing` finalizer, no signal handler, no thread. The hooks that give held
leases back at exit are registered when the process first holds a lease, once
(`test_exit_release.py` shows a normal exit releasing a held lease on Azurite).

A first child lists the modules the library's own import pulls in (logging registers its own
atexit hook when imported); a second imports those, counts, then imports every module of the
library and counts again.
"""

from __future__ import annotations

import json
import subprocess
import sys

IMPORT_ALL = """
import importlib, pkgutil
import blobsingleton
for info in pkgutil.walk_packages(blobsingleton.__path__, "blobsingleton."):
    importlib.import_module(info.name)
"""

LIST_DEPENDENCIES = (
    "import json, sys\n"
    + IMPORT_ALL
    + """
own = ("blobsingleton", "__main__", "__mp_main__")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] not in own)))
"""
)

COUNT = (
    """
import atexit, importlib, json, multiprocessing.util, signal, sys, threading
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        pass

def hooks():
    return {"atexit": atexit._ncallbacks(),
            "finalizers": len(multiprocessing.util._finalizer_registry),
            "threads": threading.active_count(),
            "signals": [repr(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT)]}

counts = {"before": hooks()}
"""
    + IMPORT_ALL
    + """
counts["imported"] = hooks()

from blobsingleton import singleton
from blobsingleton.testing import memory_backends

@singleton("nightly")
def job() -> None:
    counts.setdefault("held", hooks())

with memory_backends():
    job()
    job()
counts["after_two_leases"] = hooks()
print(json.dumps(counts))
"""
)


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_importing_the_library_registers_nothing_and_the_first_lease_registers_once() -> None:
    dependencies = json.loads(run(LIST_DEPENDENCIES))
    assert "logging" in dependencies
    counts = json.loads(run(COUNT, *dependencies))
    before, imported, held = counts["before"], counts["imported"], counts["held"]
    assert imported == before  # nothing at import: atexit, finalizers, threads, signals
    assert held["atexit"] == before["atexit"] + 1  # release_all, at the first lease
    assert held["finalizers"] == before["finalizers"] + 1  # a multiprocessing child's exit
    assert held["signals"] == before["signals"]  # install_signal_handlers() is the app's call
    after = counts["after_two_leases"]
    assert (after["atexit"], after["finalizers"]) == (held["atexit"], held["finalizers"])
