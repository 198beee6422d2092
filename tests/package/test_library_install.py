"""`blobsingleton` on its own: installed in a fresh virtualenv outside the repository, with
none of the app's dependencies, running a minimal example against Azurite."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

from devhost import services

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
print(json.dumps({"token": token, "runs": runs, "app_dependencies": absent}))
"""


@pytest.mark.timeout(600)
def test_the_library_installs_alone_and_runs_its_example(
    tmp_path: Path, azurite: services.Azurite
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet",
                              str(ROOT / "packages" / "blobsingleton")], cwd=tmp_path,
                             capture_output=True, text=True, timeout=540)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    env = {"PATH": "/usr/bin:/bin", "AzureWebJobsStorage": azurite.connection_string}
    ran = subprocess.run([python, "-c", EXAMPLE], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = ran.stdout.strip().splitlines()[-1]
    assert '"runs": ["a"]' in result  # the second call was a duplicate
    assert '"app_dependencies": []' in result  # no SendGrid, pyx12, Tables or azure-functions
    assert '"token": ' in result
