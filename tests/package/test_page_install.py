"""The library page's install section, done as printed in a fresh virtualenv outside the
repository (issue 48, item 3): its first command (a path install from the repository's root)
works as written, its wheel route needs pip alone (no `build`, nothing undeclared: the fresh
environment has nothing but the standard library and pip's own build isolation), the wheel
named in an app's requirements.txt installs with its extras, the page's first example runs
there as copied, and the test kit without azure-functions names the extra that brings it.

pip runs with this machine's configuration and cache (PyPI is reachable), from the checkout's
pip (`pip --python`), so the new environment needs no pip of its own and is made in a fraction
of a second.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.test_doc_examples import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "packages" / "blobsingleton" / "README.md"

pytestmark = [pytest.mark.services, pytest.mark.timeout(600)]  # child processes: pip, Python


def _section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def _commands(section: str) -> list[list[str]]:
    """The ```sh commands of a page's section, in order (comments dropped), as argv."""
    found = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return [shlex.split(line, comments=True) for block in found for line in block.splitlines()
            if shlex.split(line, comments=True)]  # fmt: skip


def _environment(where: Path) -> Path:
    """A fresh virtualenv without pip (the checkout's pip installs into it)."""
    venv.create(where, with_pip=False)
    return where / "bin" / "python"


def _pip(python: Path, argv: list[str], cwd: Path) -> None:
    """`argv` (a `pip ...` command as the page prints it) run for the environment of `python`."""
    assert argv[0] == "pip", argv
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), *argv[1:], "--quiet"],
        cwd=cwd, capture_output=True, text=True, timeout=500,
    )  # fmt: skip
    assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stderr[-3000:]}"


def _run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin"})  # fmt: skip


#: The first trial's frictions (issue 48), re-run against the installed wheel: each prints
#: True when it is gone.
FRICTIONS = """
import asyncio, json, warnings
import azure.functions as func
from blobsingleton import Busy, once
from blobsingleton.errors import KeyTemplateError
from blobsingleton.testing import check_busy_policies, event_hub_event, memory_backends

gone = {}
try:
    @once("charge-{event.sequence_number}")
    def partial(event: func.EventHubEvent) -> None: ...
except KeyTemplateError as error:
    gone["dotted key refused"] = "{PartitionId}" in str(error)
ran = []

@once("charge-{PartitionId}-{event.sequence_number}")
def charge(event: func.EventHubEvent) -> None:
    ran.append(event.sequence_number)

with memory_backends():
    for partition in "23":
        charge(event_hub_event({}, sequence_number=7, partition_id=partition))
    charge.each([event_hub_event({}, sequence_number=8, partition_id=p) for p in "23"])
gone["equal numbers of two partitions run"] = ran == [7, 7, 8, 8]
app = func.FunctionApp()
try:
    @once("k-{order_id}")
    @app.queue_trigger(arg_name="msg", queue_name="q", connection="AzureWebJobsStorage")
    def above(msg: func.QueueMessage) -> None: ...
except TypeError as error:
    gone["decorator order named"] = "under every @app" in str(error)
try:
    once("k", on_in_progress=Busy.SKIP)
except TypeError as error:
    gone["0.4 spelling taught"] = "busy=Busy.skip()" in str(error)

@once("k-{x}")
async def later(x: str) -> None: ...

try:
    later.each(["1"])
except AttributeError as error:
    gone["each_async named"] = "each_async" in str(error)

@once("s-{x}")
def blocking(x: str) -> None: ...

async def handler() -> None:
    blocking("1")

with memory_backends(), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    asyncio.run(handler())
gone["loop warned"] = any("async def" in str(w.message) for w in caught)
checked = func.FunctionApp()

@checked.queue_trigger(arg_name="msg", queue_name="q", connection="AzureWebJobsStorage")
@once("k-{order_id}", busy=Busy.defer(queue="q"))
def take(msg: func.QueueMessage) -> None: ...

check_busy_policies(checked)
check_busy_policies(checked)
gone["busy check twice"] = True
print(json.dumps(gone))
"""


def test_the_pages_install_section_as_printed_then_its_first_example(tmp_path: Path) -> None:
    install = _section("Install")
    first_command, build_wheel = _commands(install)
    assert first_command == ["pip", "install", "./packages/blobsingleton[queue,identity]"]
    outside = tmp_path / "user"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT)

    # 1. The first command, from the repository's root as the page says, into a fresh env:
    python = _environment(tmp_path / "env")
    _pip(python, first_command, cwd=ROOT)
    kit = _run(python, "import blobsingleton.testing", outside)
    assert kit.returncode != 0 and "[test] extra" in kit.stderr, kit.stderr
    assert shlex.join(["pip", "install", "./packages/blobsingleton[test]"]) in kit.stderr
    _pip(python, ["pip", "install", "azure-functions"], cwd=outside)  # the app's environment
    first_example = blocks(PAGE)[0]  # the page's first example, as copied
    assert not first_example.fragment and first_example.module is None
    (outside / "first_example.py").write_text(first_example.code.code)
    ran = _run(python, "import runpy; runpy.run_path('first_example.py')", outside)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert _run(python, "import azure.storage.queue, azure.identity", outside).returncode == 0

    # 2. The wheel route: built with pip alone into an app's folder, named in its requirements.
    checkout = tmp_path / "checkout"  # the repository, as the page's `..` sees it
    (checkout / "packages").mkdir(parents=True)
    (checkout / "packages" / "blobsingleton").symlink_to(PAGE.parent)
    app = tmp_path / "my-app"
    _pip(_environment(tmp_path / "builder"), build_wheel, cwd=checkout)
    [wheel] = (app / "wheels").glob("blobsingleton-*.whl")
    requirements = re.search(r"```text\n# my-app/requirements.txt\n(.*?)```", install, re.DOTALL)
    assert requirements is not None
    (app / "requirements.txt").write_text(requirements.group(1))
    assert f"./wheels/{wheel.name}[queue,identity]" in requirements.group(1)  # the page's name
    deployed = _environment(tmp_path / "deployed")
    _pip(deployed, ["pip", "install", "-r", "requirements.txt"], cwd=app)
    ran = _run(deployed, "import runpy; runpy.run_path('../user/first_example.py')", app)
    assert ran.returncode == 0, ran.stderr[-3000:]
    where = "import blobsingleton, azure.storage.queue; print(blobsingleton.__file__)"
    shown = _run(deployed, where, app)
    assert shown.returncode == 0 and str(tmp_path / "deployed") in shown.stdout, shown.stderr
    frictions = _run(deployed, FRICTIONS, app)
    assert frictions.returncode == 0, frictions.stderr[-3000:]
    gone = json.loads(frictions.stdout.strip().splitlines()[-1])
    assert gone == dict.fromkeys(
        ["dotted key refused", "equal numbers of two partitions run", "decorator order named",
         "0.4 spelling taught", "each_async named", "loop warned", "busy check twice"], True
    )  # fmt: skip
