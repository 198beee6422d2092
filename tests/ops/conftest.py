"""Fixtures for the operations tests: containers of their own on the session's Azurite."""

from __future__ import annotations

import uuid

import pytest

from tests.ops.support import OpsEnv


@pytest.fixture
def ops_env(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> OpsEnv:
    suffix = uuid.uuid4().hex[:10]
    env = OpsEnv(
        locks=f"locks-{suffix}",
        runs=f"runonce-{suffix}",
        audit=f"audit-{suffix}",
        jobs=f"jobs-{suffix}",
        units_queue=f"units-{suffix}",
        imports=f"imports-{suffix}",
    )
    for name, value in env.settings().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MEMBERS_TABLE", f"Members{suffix}")
    return env
