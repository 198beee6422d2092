"""The zip `func azure functionapp publish` uploads, installed the way remote build installs it.

The package is the app folder minus `.funcignore` (gitignore patterns, matched here by git
itself), unpacked into an empty folder, `pip install -r requirements.txt` in a fresh virtual
environment, then `function_app` imported and indexed there, with nothing from this checkout
on the path. Every function must index, nothing the app imports may live in an excluded folder
(tests, devhost, bench, node packages), and nothing local or secret may be in the zip.
"""

from __future__ import annotations

import json
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

import function_app
from tests.support import fresh_functions

ROOT = Path(__file__).resolve().parents[2]
NEVER_DEPLOYED = (
    "tests/", "devhost/", "harness/", "bench/", "node_modules/", ".venv/", ".devhost/", ".git/"
)  # fmt: skip
NEVER_DEPLOYED_FILES = ("local.settings.json",)

INDEX = """
import json, blobsingleton, function_app
app = function_app.app
names = sorted(f.get_function_name() for f in app.get_functions())
print(json.dumps({"functions": names, "library": blobsingleton.__file__}))
"""


def package_files() -> list[str]:
    """Tracked files minus what `.funcignore` excludes (git applies the patterns)."""

    def listed(*extra: str) -> set[str]:
        out = subprocess.run(["git", "ls-files", "-c", *extra], cwd=ROOT, capture_output=True,
                             text=True, check=True)  # fmt: skip
        return set(out.stdout.splitlines())

    excluded = listed("-i", "--exclude-from=.funcignore")
    return sorted(listed() - excluded)


def build_zip(target: Path) -> Path:
    archive = target / "app.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in package_files():
            if (ROOT / name).is_file():
                zf.write(ROOT / name, name)
    return archive


@pytest.mark.timeout(600)
@pytest.mark.services  # pip installs into a new virtual environment, a child Python indexes
def test_the_published_package_installs_and_indexes_on_its_own(tmp_path: Path) -> None:
    archive = build_zip(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    assert "function_app.py" in names and "requirements.txt" in names and "host.json" in names
    leaked = [n for n in names if n.startswith(NEVER_DEPLOYED) or n.endswith(NEVER_DEPLOYED_FILES)]
    assert not leaked, leaked

    app_dir = tmp_path / "wwwroot"
    zipfile.ZipFile(archive).extractall(app_dir)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r",
                              "requirements.txt"], cwd=app_dir, capture_output=True, text=True,
                             timeout=540)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]

    indexed = subprocess.run([str(python), "-c", INDEX], cwd=app_dir, capture_output=True,
                             text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                             "PYTHONPATH": str(app_dir)})  # fmt: skip
    assert indexed.returncode == 0, indexed.stderr[-3000:]
    expected = sorted(fresh_functions(function_app.app))
    result = json.loads(indexed.stdout.strip().splitlines()[-1])
    assert result["functions"] == expected
    assert result["library"].startswith(str(env_dir))  # installed from requirements.txt
