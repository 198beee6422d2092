"""No secret is committed: every tracked file is scanned for the shapes keys come in.

The one key that may appear is Azurite's account key: Microsoft publishes it, and it opens
only a local emulator. `local.settings.json` (real settings) must not be tracked at all.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.services import AZURITE_KEY

ROOT = Path(__file__).resolve().parents[2]

PATTERNS = {
    "storage account key": re.compile(r"AccountKey=([A-Za-z0-9+/=]{40,})"),
    "SendGrid API key": re.compile(r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    "SAS signature": re.compile(r"[?&]sig=[A-Za-z0-9%+/=]{20,}"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "function key in a URL": re.compile(r"[?&]code=[A-Za-z0-9_-]{20,}"),
}


def tracked_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / name for name in names.stdout.decode().split("\0") if name]


def test_no_tracked_file_holds_a_secret() -> None:
    found = []
    files = tracked_files()
    assert len(files) > 50  # the scan really ran over the repository
    for path in files:
        if path.suffix in {".png", ".jpg", ".ico"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for kind, pattern in PATTERNS.items():
            for match in pattern.finditer(text):
                if kind == "storage account key" and match[1] == AZURITE_KEY:
                    continue
                found.append(f"{path.relative_to(ROOT)}: {kind}")
    assert not found, found


def test_local_settings_are_ignored_not_tracked() -> None:
    names = {path.name for path in tracked_files()}
    assert "local.settings.json" not in names
    ignored = subprocess.run(["git", "check-ignore", "-q", "local.settings.json"], cwd=ROOT)
    assert ignored.returncode == 0
