"""Outside Azure with no host id setting, the namespace is the machine's name and a hash of
the app folder (the host's own local rule): two processes started from different folders
against one storage account are two apps to each other and both run the work. Each says so,
once, at first use, naming the settings that make them one app; with the setting they are.

Real processes against Azurite (the skewed child with no clock offset).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

CHILD = str(Path(__file__).resolve().parents[1] / "skew" / "skewed_child.py")
#: What would make the process an Azure host, or name its namespace.
HOST_SETTINGS = ("AzureFunctionsWebHost__hostid", "AzureFunctionsWebHost:hostid",
                 "BLOBSINGLETON_NAMESPACE", "AzureWebJobsScriptRoot", "WEBSITE_INSTANCE_ID",
                 "WEBSITE_SITE_NAME", "WEBSITE_SKU", "CONTAINER_NAME", "MANAGED_ENVIRONMENT",
                 "POD_NAMESPACE")  # fmt: skip
WARNING = "no AzureFunctionsWebHost__hostid, no BLOBSINGLETON_NAMESPACE"


def run_from(folder: Path, env: dict[str, str], key: str) -> tuple[list[str], str]:
    folder.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, CHILD, "0", "once-alo", key, "0", "5"], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines(), done.stderr


def test_two_processes_from_different_folders_each_warn_once_and_the_setting_joins_them(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    local = {k: v for k, v in subprocess_env.items() if k not in HOST_SETTINGS}
    key = f"email-{uuid.uuid4().hex[:8]}"
    out_a, err_a = run_from(tmp_path / "a", local, key)
    out_b, err_b = run_from(tmp_path / "b", local, key)
    assert "ran" in out_a and "ran" in out_b  # the trap: two namespaces, the work twice
    for err in (err_a, err_b):
        assert err.count(WARNING) == 1, err[-2000:]
        assert "Set BLOBSINGLETON_NAMESPACE (or AzureFunctionsWebHost__hostid)" in err
    assert err_a.split("namespace ")[1].split()[0] != err_b.split("namespace ")[1].split()[0]

    joined = {**local, "BLOBSINGLETON_NAMESPACE": f"orders-{uuid.uuid4().hex[:8]}"}
    out_a, err_a = run_from(tmp_path / "a", joined, key)
    out_b, err_b = run_from(tmp_path / "b", joined, key)
    assert "ran" in out_a and "ran" not in out_b  # one app: the work once
    assert WARNING not in err_a + err_b
