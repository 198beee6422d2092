from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

RACER = str(Path(__file__).with_name("racer.py"))


def test_eight_processes_on_the_same_200_keys_execute_each_exactly_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "executions.txt"
    procs = [
        subprocess.Popen([sys.executable, RACER, str(out), "200"], env=subprocess_env)
        for _ in range(8)
    ]
    assert all(p.wait(300) == 0 for p in procs)
    executions = Counter(out.read_text().split())
    assert len(executions) == 200
    assert set(executions.values()) == {1}
