"""`blobsingleton` as released: ONE distribution. The wheel `python -m build` makes from the
library's folder (timer schedules inside, as `blobsingleton.schedules`) passes `twine check
--strict`, installs with `pip install <wheel>[queue,identity]` in a fresh virtualenv outside
the repository with every dependency from PyPI itself (no local mirror, no find-links, none of
the app's dependencies), type-checks under `mypy --strict` as installed, and runs its page's
examples against Azurite (and its testing module without storage, once azure-functions is
there: before, importing it names the `[test]` extra); and the library's own
tests pass from a copy of its folder alone, against that wheel with its `test` extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from harness import services

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "packages" / "blobsingleton"
PYPI = "https://pypi.org/simple"


def pypi_only_env(home: Path) -> dict[str, str]:
    """pip reads PyPI and nothing else: no configuration file (this machine's has a local
    mirror and find-links), no PIP_* variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": PYPI, "HOME": str(home)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The library's sdist and wheel, built from its folder alone (one `python -m build`)."""
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(LIBRARY)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(path.name.split("-")[0] for path in dist.iterdir()) == [
        "blobsingleton", "blobsingleton"
    ]  # fmt: skip
    return next(dist.glob("blobsingleton-*.whl"))


def fresh_venv(where: Path) -> str:
    venv.create(where, with_pip=True)
    return str(where / "bin" / "python")


def pip_install(python: str, cwd: Path, *requirements: str) -> None:
    done = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", *requirements],
        cwd=cwd, env=pypi_only_env(cwd), capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


EXAMPLE = """
import importlib.util, json
from blobsingleton import BlobLease, once

with BlobLease("example-key") as lease:
    token = lease.token

runs = []

@once("example-{key}")
def work(key: str) -> None:
    runs.append(key)

work("a"); work("a")
from blobsingleton import Busy, current_run
from blobsingleton.testing import memory_backends

sent = []

@once("email-{event_id}", busy=Busy.SKIP)
def notify(event_id: str) -> None:
    current_run().ensure_held()
    sent.append(event_id)

with memory_backends() as memory:
    notify("e1"); notify("e1")
from datetime import UTC, datetime
from blobsingleton.schedules import next_occurrence
following = next_occurrence("0 0 2 * * *", datetime(2026, 1, 1, tzinfo=UTC)).isoformat()
print(json.dumps({"token": token, "runs": runs, "sent": sent, "next": following}))
"""
#: Before azure-functions is installed: the wheel brings none of the app's dependencies, and
#: its test kit says which extra it needs.
ALONE = """
import importlib.util, json
absent = [m for m in ("sendgrid", "pyx12", "azure.data", "azure.functions")
          if importlib.util.find_spec(m.split(".")[0]) and importlib.util.find_spec(m)]
try:
    import blobsingleton.testing
except ImportError as error:
    kit = str(error)
print(json.dumps({"app_dependencies": absent, "kit": kit}))
"""


@pytest.mark.timeout(900)
def test_the_built_wheel_passes_twine_installs_alone_from_pypi_and_runs_its_examples(
    tmp_path: Path, built: Path, azurite: services.Azurite
) -> None:
    wheel = built
    names = zipfile.ZipFile(wheel).namelist()
    assert "blobsingleton/py.typed" in names and "blobsingleton/testing.py" in names
    assert "blobsingleton/schedules/__init__.py" in names  # the schedules ship inside
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, wheel.parent.iterdir())],
        capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    outside = tmp_path / "user"  # tmp_path is outside the repository
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT)
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, outside, f"{wheel}[queue,identity]")
    requires = subprocess.run([python, "-m", "pip", "show", "blobsingleton"], cwd=outside,
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "timerschedules" not in requires
    env = {"PATH": "/usr/bin:/bin", "AzureWebJobsStorage": azurite.connection_string,
           "BLOBSINGLETON_NAMESPACE": "wheel-example"}  # fmt: skip
    alone = subprocess.run([python, "-c", ALONE], cwd=outside, env=env, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert '"app_dependencies": []' in alone.stdout  # no SendGrid, pyx12, Tables or azure-functions
    assert "[test] extra" in alone.stdout  # the kit names what it needs
    pip_install(python, outside, "mypy", "azure-functions")  # a function app has azure-functions
    typed = subprocess.run(
        [python, "-m", "mypy", "--strict", "--no-incremental", "-p", "blobsingleton"],
        cwd=outside, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert typed.returncode == 0, typed.stdout[-3000:]
    ran = subprocess.run([python, "-c", EXAMPLE], cwd=outside, env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = ran.stdout.strip().splitlines()[-1]
    assert '"runs": ["a"]' in result  # the second call was a duplicate
    assert '"token": ' in result
    assert '"sent": ["e1"]' in result  # the testing module, from the wheel, without storage
    assert '"next": "2026-01-01T02:00:00+00:00"' in result  # blobsingleton.schedules
