"""Fixtures for the operations tests: containers of their own on the session's Azurite."""

from __future__ import annotations

import uuid

import pytest

from tests.ops.support import OpsEnv
from tests.support import AppSettings


@pytest.fixture
def ops_env(storage_env: str, app_settings: AppSettings) -> OpsEnv:
    """Containers and a queue of this test's own for every view the operator tools show."""
    suffix = uuid.uuid4().hex[:10]
    env = OpsEnv(
        locks=f"locks-{suffix}",
        runs=f"runonce-{suffix}",
        audit=f"audit-{suffix}",
        jobs=f"jobs-{suffix}",
        units_queue=f"units-{suffix}",
        imports=f"imports-{suffix}",
        notes=f"notes-{suffix}",
        notifications_queue=f"notify-{suffix}",
        imports_queue=f"import-{suffix}",
    )
    app_settings.set({**env.settings(), "MEMBERS_TABLE": f"Members{suffix}"})
    return env
