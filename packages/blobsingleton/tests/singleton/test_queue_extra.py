"""Busy.DEFER needs the queue SDK (the `[queue]` extra): without it, a DEFER function is
refused when it is decorated, naming the extra, instead of failing with ModuleNotFoundError at
the first busy delivery under contention. Every other policy decorates and runs without it.

A child Python whose import system cannot find `azure.storage.queue` (a meta-path finder
that refuses it, as an environment without the extra would), nothing else changed.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, sys

class NoQueueSdk:
    def find_spec(self, name, path=None, target=None):
        if name == "azure.storage.queue" or name.startswith("azure.storage.queue."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoQueueSdk())
import azure.functions as func
from blobsingleton import Busy, once, singleton
from blobsingleton.testing import memory_backends

refused = {}
for name, decorator in (
    ("singleton", lambda: singleton("import-{account}", busy=Busy.defer(queue="imports"))),
    ("once", lambda: once("email-{event_id}", busy=Busy.defer(queue="emails"))),
):
    try:
        @decorator()
        def handler(msg: func.QueueMessage, account: str = "", event_id: str = "") -> None:
            pass
    except ImportError as error:
        refused[name] = [str(error), error.name]

ran = []

@singleton("import-{account}", busy=Busy.SKIP)
def skipping(account: str) -> None:
    ran.append(account)

with memory_backends():
    skipping("acme")
print(json.dumps({"refused": refused, "ran": ran,
                  "sdk_loaded": "azure.storage.queue" in sys.modules}))
"""


def test_defer_without_the_queue_sdk_is_refused_when_decorated_naming_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["refused"]) == {"singleton", "once"}
    for message, module in result["refused"].values():
        assert "pip install blobsingleton[queue]" in message and "Busy.DEFER" in message
        assert module == "azure.storage.queue"
    assert result["ran"] == ["acme"]  # other policies need no queue SDK
    assert result["sdk_loaded"] is False


def test_defer_with_the_queue_sdk_decorates() -> None:
    import azure.functions as func
    from blobsingleton import Busy, singleton

    @singleton("import-{account}", busy=Busy.defer(queue="imports"))
    def handler(msg: func.QueueMessage, account: str = "") -> None:
        pass

    assert callable(handler)
