"""`blobsingleton` as released: the wheel `python -m build` makes passes `twine check --strict`,
installs in a fresh virtualenv outside the repository with none of the app's dependencies,
and runs its page's examples against Azurite (and its testing module without storage)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from harness import services

ROOT = Path(__file__).resolve().parents[2]

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
absent = [m for m in ("sendgrid", "pyx12", "azure.data", "azure.functions")
          if importlib.util.find_spec(m.split(".")[0]) and importlib.util.find_spec(m)]
from blobsingleton import Busy, current_run
from blobsingleton.testing import memory_backends

sent = []

@once("email-{event_id}", on_in_progress=Busy.SKIP)
def notify(event_id: str) -> None:
    current_run().ensure_held()
    sent.append(event_id)

with memory_backends() as memory:
    notify("e1"); notify("e1")
print(json.dumps({"token": token, "runs": runs, "app_dependencies": absent, "sent": sent}))
"""


@pytest.mark.timeout(600)
def test_the_built_wheel_passes_twine_installs_alone_and_runs_its_examples(
    tmp_path: Path, azurite: services.Azurite
) -> None:
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist),
                            str(ROOT / "packages" / "blobsingleton")],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(dist.glob("blobsingleton-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "blobsingleton/py.typed" in names and "blobsingleton/testing.py" in names
    artifacts = [str(path) for path in dist.iterdir()]
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *artifacts],
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", str(wheel)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=540)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    env = {"PATH": "/usr/bin:/bin", "AzureWebJobsStorage": azurite.connection_string}
    ran = subprocess.run([python, "-c", EXAMPLE], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = ran.stdout.strip().splitlines()[-1]
    assert '"runs": ["a"]' in result  # the second call was a duplicate
    assert '"app_dependencies": []' in result  # no SendGrid, pyx12, Tables or azure-functions
    assert '"token": ' in result
    assert '"sent": ["e1"]' in result  # the testing module, from the wheel, without storage
