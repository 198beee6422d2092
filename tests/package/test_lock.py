"""The locked dependency files (`make lock`, deploy/lock.py): every package the deployment and
the tests install is pinned with hashes, the two sets agree, the repository's own wheels in
deploy/ are the ones their sources build, and `make audit` never passes without having
audited."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_HASH = r"\s+--hash=sha256:[0-9a-f]{64}\s*\\?\n?"
_ENTRY = re.compile(rf"^(?P<req>\S[^\\\n]*?)\s*\\\n(?P<hashes>(?:{_HASH})+)", re.MULTILINE)


def entries(name: str) -> dict[str, str]:
    """requirement -> its first hash, for every entry of a compiled lock; fails on an entry
    without a hash."""
    text = (ROOT / name).read_text()
    found = {m["req"]: m["hashes"].split("sha256:")[1][:64] for m in _ENTRY.finditer(text)}
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith((" ", "#"))]
    assert sorted(ln.rstrip(" \\") for ln in lines) == sorted(found), f"{name}: unhashed entries"
    return found


def pins(name: str) -> dict[str, str]:
    return dict(r.split("==", 1) for r in entries(name) if "==" in r)


def test_every_package_is_pinned_with_hashes_and_nothing_points_elsewhere() -> None:
    for name in ("requirements.txt", "requirements-dev.txt"):
        text = (ROOT / name).read_text()
        assert not re.search(r"--(extra-)?index-url|--find-links|file://|/tmp/|/work/", text)
        assert entries(name)
    direct = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements.in").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert direct.items() <= pins("requirements.txt").items()


def test_the_tests_run_the_versions_the_deployment_installs() -> None:
    runtime, dev = pins("requirements.txt"), pins("requirements-dev.txt")
    assert {name: dev.get(name) for name in runtime} == runtime
    assert dev["setuptools"] != "65.5.0"  # the venv's bundled one is replaced


def test_the_librarys_dependencies_are_in_the_lock() -> None:
    project = tomllib.loads((ROOT / "packages/blobsingleton/pyproject.toml").read_text())["project"]
    needed = project["dependencies"] + project["optional-dependencies"]["queue"]
    needed += project["optional-dependencies"]["identity"]
    names = {re.split(r"[<>=\[ ]", requirement)[0].lower() for requirement in needed}
    wheels = {r.split("/")[-1].split("-")[0] for r in entries("requirements.txt") if "/" in r}
    assert names <= set(pins("requirements.txt")) | wheels


def test_deploy_holds_only_the_wheels_the_lock_installs() -> None:
    """A package folded into another (timerschedules, now blobsingleton.schedules) leaves no
    wheel behind that nothing installs, and the library needs no wheel beside its own."""
    locked = {r.removeprefix("./deploy/") for r in entries("requirements.txt") if "/" in r}
    assert {wheel.name for wheel in (ROOT / "deploy").glob("*.whl")} == locked
    assert [name.split("-")[0] for name in locked] == ["blobsingleton"]


@pytest.mark.parametrize("package", ["blobsingleton"])
def test_the_wheel_in_deploy_is_the_one_the_package_source_builds(
    tmp_path: Path, package: str
) -> None:
    """A package change without `make lock` would deploy the old package: this fails then."""
    [wheel] = (ROOT / "deploy").glob(f"{package}-*.whl")
    [line] = [r for r in entries("requirements.txt") if r.startswith(f"./deploy/{package}-")]
    assert line == f"./deploy/{wheel.name}"
    locked = entries("requirements.txt")[line]
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == locked
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                    str(tmp_path), str(ROOT / "packages" / package)],
                   check=True, capture_output=True, env=env, timeout=120)  # fmt: skip
    [rebuilt] = tmp_path.glob(f"{package}-*.whl")
    assert rebuilt.name == wheel.name
    assert hashlib.sha256(rebuilt.read_bytes()).hexdigest() == locked, (
        f"packages/{package} changed since the lock: run `make lock` and commit its output"
    )


@pytest.mark.services  # a child make, pip-audit and npm
@pytest.mark.timeout(300)
def test_make_audit_fails_loudly_when_it_cannot_audit() -> None:
    """No vulnerability service reachable (every request through a closed proxy): the run
    fails and says so; it never reports "no known vulnerability" about what it did not see."""
    closed = "http://127.0.0.1:9"
    env = {**os.environ, "HTTPS_PROXY": closed, "HTTP_PROXY": closed, "https_proxy": closed,
           "http_proxy": closed, "npm_config_registry": closed, "NO_PROXY": ""}  # fmt: skip
    done = subprocess.run(["make", "--no-print-directory", "audit"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)  # fmt: skip
    assert done.returncode != 0
    assert "make audit: FAILED" in done.stderr
    assert "no known vulnerability" not in done.stdout
