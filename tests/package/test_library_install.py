"""`blobsingleton` as released: the wheel `python -m build` makes (beside `timerschedules`, which
it reads timer schedules with) passes `twine check --strict`, installs in a fresh virtualenv
outside the repository with none of the app's dependencies, type-checks under `mypy --strict`
as installed, and runs its page's examples against Azurite (and its testing module without
storage); and the library's own tests run from its folder with only its declared `test` extra.
"""

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
    for package in ("timerschedules", "blobsingleton"):
        built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist),
                                str(ROOT / "packages" / package)],
                               capture_output=True, text=True, timeout=300)  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(dist.glob("blobsingleton-*.whl"))
    schedules_wheel = next(dist.glob("timerschedules-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "blobsingleton/py.typed" in names and "blobsingleton/testing.py" in names
    artifacts = [str(path) for path in dist.iterdir()]
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *artifacts],
                             capture_output=True, text=True)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(schedules_wheel), str(wheel), "mypy"],
        cwd=tmp_path, capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    typed = subprocess.run(
        [python, "-m", "mypy", "--strict", "--no-incremental", "-p", "blobsingleton",
         "-p", "timerschedules"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert typed.returncode == 0, typed.stdout[-3000:]
    env = {"PATH": "/usr/bin:/bin", "AzureWebJobsStorage": azurite.connection_string}
    ran = subprocess.run([python, "-c", EXAMPLE], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = ran.stdout.strip().splitlines()[-1]
    assert '"runs": ["a"]' in result  # the second call was a duplicate
    assert '"app_dependencies": []' in result  # no SendGrid, pyx12, Tables or azure-functions
    assert '"token": ' in result
    assert '"sent": ["e1"]' in result  # the testing module, from the wheel, without storage


@pytest.mark.services  # a virtualenv, pip and pytest in child processes, one starting Azurite
@pytest.mark.timeout(900)
def test_the_librarys_tests_run_from_its_folder_with_its_test_extra(tmp_path: Path) -> None:
    """`pip install -e '.[test]'` in a fresh virtualenv, then `pytest` in the library's folder:
    every import its tests need is declared (collection would stop otherwise), and the tests
    that need no Azurite pass, with one that starts Azurite itself from node_modules."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    packages = ROOT / "packages"
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "-e", str(packages / "timerschedules"),
         "-e", f"{packages / 'blobsingleton'}[test]"],
        cwd=tmp_path, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    for selection in (["-m", "not services"], ["tests/once/test_replay.py"]):
        ran = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection],
            cwd=packages / "blobsingleton", env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout[-3000:]
        assert " passed" in ran.stdout and "skipped" not in ran.stdout.splitlines()[-1]
