"""Outside Azure with no host id setting, the namespace is the machine's name and a hash of
the app's folder (the host's own local rule), found from the app, not from where its process
starts: two processes of one app started from different folders against one storage account
are one app and run the work once; a copy of the app in another folder is another app and
runs it again. Each says so, once, at first use, naming the folder it keyed on and the
settings that make processes one app; with the setting, even the copy is the same app.

Real processes against Azurite, each running a function app's function_app.py as a script.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

#: What would make the process an Azure host, or name its namespace.
HOST_SETTINGS = ("AzureFunctionsWebHost__hostid", "AzureFunctionsWebHost:hostid",
                 "BLOBSINGLETON_NAMESPACE", "AzureWebJobsScriptRoot", "WEBSITE_INSTANCE_ID",
                 "WEBSITE_SITE_NAME", "WEBSITE_SKU", "CONTAINER_NAME", "MANAGED_ENVIRONMENT",
                 "POD_NAMESPACE")  # fmt: skip
WARNING = "no AzureFunctionsWebHost__hostid, no BLOBSINGLETON_NAMESPACE"
APP = """\
import sys

from blobsingleton import once


@once(sys.argv[1])
def work() -> str:
    print("ran")
    return "done"


if __name__ == "__main__":
    print(work())
"""


def run(app: Path, cwd: Path, env: dict[str, str], key: str) -> tuple[list[str], str]:
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, str(app / "function_app.py"), key], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=90)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines(), done.stderr


def _namespace(err: str) -> str:
    return err.split("namespace ")[1].split()[0]


def test_one_app_started_from_two_folders_is_one_app_and_a_copy_another(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    local = {k: v for k, v in subprocess_env.items() if k not in HOST_SETTINGS}
    app = tmp_path / "orders-app"
    app.mkdir()
    (app / "function_app.py").write_text(APP)
    (app / "host.json").write_text('{"version": "2.0"}')
    key = f"email-{uuid.uuid4().hex[:8]}"
    out_a, err_a = run(app, app, local, key)
    out_b, err_b = run(app, tmp_path / "elsewhere" / "deeper", local, key)
    assert out_a == ["ran", "done"] and out_b == ["done"]  # one app: the work once
    assert _namespace(err_a) == _namespace(err_b)
    for err in (err_a, err_b):
        assert err.count(WARNING) == 1, err[-2000:]
        assert f"app folder {app.resolve()} (the folder holding function_app.py" in err
        assert "Set BLOBSINGLETON_NAMESPACE (or AzureFunctionsWebHost__hostid)" in err

    copy = tmp_path / "copy-of-the-app"
    shutil.copytree(app, copy)
    out_c, err_c = run(copy, tmp_path, local, key)
    assert out_c == ["ran", "done"]  # the trap left: another folder's app is another app
    assert _namespace(err_c) != _namespace(err_a) and str(copy.resolve()) in err_c

    joined = {**local, "BLOBSINGLETON_NAMESPACE": f"orders-{uuid.uuid4().hex[:8]}"}
    out_a, err_a = run(app, app, joined, key)
    out_c, err_c = run(copy, tmp_path, joined, key)
    assert out_a == ["ran", "done"] and out_c == ["done"]  # one namespace: the work once
    assert WARNING not in err_a + err_c
