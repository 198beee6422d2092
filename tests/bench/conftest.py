"""Benchmarks at a tiny size on the session's Azurite (BENCH_AZURITE: no Azurite of their own)."""

from __future__ import annotations

import uuid

import pytest

from bench import SHARED
from tests.support import AppSettings


@pytest.fixture
def bench_env(storage_env: str, app_settings: AppSettings) -> str:
    """The session's Azurite for every benchmark; settings they write are undone afterwards."""
    suffix = uuid.uuid4().hex[:8]
    app_settings.set(
        {
            SHARED: storage_env,
            "IMPORTS_CONTAINER": f"bench-imports-{suffix}",
            "MEMBERS_TABLE": f"BenchMembers{suffix}",
        }
    )
    return storage_env
