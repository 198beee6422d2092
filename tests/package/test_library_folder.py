"""The library's own tests pass from a copy of its folder alone, against the wheel built from
it with its `test` extra from PyPI (a file of its own, so that it runs beside
`test_library_install.py` in another test process: each takes minutes of pip and pytest)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.package.test_library_install import LIBRARY, ROOT, fresh_venv, pip_install
from tests.package.test_library_install import built as built  # the module-scoped fixture


@pytest.mark.services  # a virtualenv, pip from PyPI, a child pytest that starts Azurite
@pytest.mark.timeout(1200)
def test_the_librarys_tests_pass_from_a_copy_of_its_folder_against_the_wheel(
    tmp_path: Path, built: Path
) -> None:
    """A copy of packages/blobsingleton outside the repository, its source folder removed so
    that only the installed wheel (`[test]` extra, from PyPI) can be imported: every import its
    tests need is declared (collection would stop otherwise), the tests that need no Azurite
    pass (the schedule tests among them), and so does one file that starts Azurite itself
    (AZURITE)."""
    copy = tmp_path / "blobsingleton"
    shutil.copytree(LIBRARY, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.rmtree(copy / "src")
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, tmp_path, f"{built}[queue,identity,test]")
    azurite_bin = ROOT / "node_modules" / ".bin" / "azurite"
    env = {"PATH": f"{tmp_path / 'venv' / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "AZURITE": str(azurite_bin)}  # fmt: skip
    for selection in (["-m", "not services"], ["tests/once/test_replay.py"]):
        ran = subprocess.run(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection],
            cwd=copy, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout[-3000:]
        last = ran.stdout.splitlines()[-1]
        assert " passed" in last and "skipped" not in last, last
