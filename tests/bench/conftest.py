"""Benchmarks at a tiny size on the session's Azurite (BENCH_AZURITE: no Azurite of their own)."""

from __future__ import annotations

import uuid

import pytest

from bench._storage import SHARED


@pytest.fixture
def bench_env(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's Azurite for every benchmark; settings they write are undone afterwards."""
    monkeypatch.setenv(SHARED, storage_env)
    suffix = uuid.uuid4().hex[:8]
    monkeypatch.setenv("IMPORTS_CONTAINER", f"bench-imports-{suffix}")
    monkeypatch.setenv("MEMBERS_TABLE", f"BenchMembers{suffix}")
    return storage_env
