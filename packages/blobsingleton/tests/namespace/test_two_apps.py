"""Two function apps on one storage account: each runs its own work; sharing is on purpose.

Real processes against one Azurite, each an "app" by the settings the host gives it (site
name, instance id), the same keys in both. By default each app's locks and records live in
its own namespace (its host id), as the host's own locks do; with BLOBSINGLETON_NAMESPACE set
to the same value, the two apps run the work once between them.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

CHILD = [str(Path(__file__).resolve().parents[1] / "skew" / "skewed_child.py")]


def app_env(base: dict[str, str], site: str, shared: str | None = None) -> dict[str, str]:
    env = {**base, "WEBSITE_INSTANCE_ID": f"{site}-instance-0", "WEBSITE_SITE_NAME": site}
    env.pop("BLOBSINGLETON_NAMESPACE", None)
    if shared:
        env["BLOBSINGLETON_NAMESPACE"] = shared
    return env


def start(env: dict[str, str], kind: str, key: str, work: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *CHILD, "0", kind, key, str(work), "5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(env: dict[str, str], kind: str, key: str) -> list[str]:
    proc = start(env, kind, key, 0.0)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err[-2000:]
    # "ran" when the work ran ("ran TOKEN" under a singleton, which names its fencing token)
    return ["ran" if line.split()[:1] == ["ran"] else line for line in out.splitlines()]


@pytest.mark.parametrize("kind", ["once-alo", "once-amo"])
def test_two_apps_each_run_their_own_once_work_and_a_shared_namespace_runs_it_once(
    subprocess_env: dict[str, str], kind: str
) -> None:
    key = f"email-{uuid.uuid4().hex[:8]}"
    orders, billing = app_env(subprocess_env, "orders"), app_env(subprocess_env, "billing")
    assert "ran" in run(orders, kind, key)
    assert "ran" in run(billing, kind, key), "the second app got the first app's result"
    assert "ran" not in run(orders, kind, key)  # each app still runs its work once
    assert "ran" not in run(billing, kind, key)

    shared_key = f"email-{uuid.uuid4().hex[:8]}"
    shared_a = app_env(subprocess_env, "orders", shared="shared-mail")
    shared_b = app_env(subprocess_env, "billing", shared="shared-mail")
    assert "ran" in run(shared_a, kind, shared_key)
    assert "ran" not in run(shared_b, kind, shared_key)


def test_two_apps_do_not_block_each_others_singleton_but_a_shared_namespace_does(
    subprocess_env: dict[str, str],
) -> None:
    key = f"import-{uuid.uuid4().hex[:8]}"
    holder = start(app_env(subprocess_env, "orders"), "singleton", key, 600.0)
    try:
        assert holder.stdout is not None
        while (line := holder.stdout.readline()) and not line.startswith("ran"):
            pass
        assert line.startswith("ran"), holder.stderr.read() if holder.stderr else ""
        assert "ran" in run(app_env(subprocess_env, "billing"), "singleton", key)
        # Same app, second instance: the lease is held, so it skips.
        assert "ran" not in run(app_env(subprocess_env, "orders"), "singleton", key)
    finally:
        holder.kill()
        holder.wait()

    shared = f"import-{uuid.uuid4().hex[:8]}"
    holder = start(app_env(subprocess_env, "orders", "shared-jobs"), "singleton", shared, 600.0)
    try:
        assert holder.stdout is not None
        while (line := holder.stdout.readline()) and not line.startswith("ran"):
            pass
        assert "ran" not in run(
            app_env(subprocess_env, "billing", "shared-jobs"), "singleton", shared
        )
    finally:
        holder.kill()
        holder.wait()


def test_a_staging_slot_is_an_app_of_its_own(subprocess_env: dict[str, str]) -> None:
    key = f"email-{uuid.uuid4().hex[:8]}"
    production = app_env(subprocess_env, "orders")
    staging = {**production, "WEBSITE_SLOT_NAME": "staging"}
    assert "ran" in run(production, "once-alo", key)
    assert "ran" in run(staging, "once-alo", key)
