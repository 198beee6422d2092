"""Fixtures of the library's own tests: they run from this folder alone (`pytest` here), with
nothing of the app around, against a real Azurite they start themselves, or as part of the
repository's `make test`.

Storage tests get containers of their own per test; every storage request the library sends
is counted (`libsupport.request_counter`). Without an Azurite binary the storage tests are
skipped with the reason; the in-memory and static tests run anyway.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from blobsingleton import _connection
from blobsingleton.config import set_client_options
from blobsingleton.leases import release_all

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import libsupport  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    with contextlib.suppress(ValueError):  # the repository's conftest may have added it
        parser.addoption("--long", action="store_true", help="also run the long variants")


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import settings

    config.addinivalue_line("markers", "long: minutes-long variants, skipped unless --long")
    config.addinivalue_line("markers", "services: uses Azurite or child processes")
    config.addinivalue_line("markers", "slow: waits for real lease expiry (15 s and more)")
    settings.register_profile("default", deadline=None, max_examples=100)
    settings.register_profile("long", deadline=None, max_examples=3000)
    settings.load_profile("long" if config.getoption("--long") else "default")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if {"azurite", "storage_env", "subprocess_env"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)
        if "long" in item.keywords and not config.getoption("--long"):
            item.add_marker(pytest.mark.skip(reason="long variant: run with --long"))


@pytest.fixture(scope="session")
def azurite() -> Iterator[libsupport.Azurite]:
    binary = libsupport.azurite_binary()
    if binary is None:
        pytest.skip("no Azurite: set AZURITE or install it (npm install azurite)")
    with libsupport.azurite(binary) as instance:
        yield instance
        release_all()  # leases a test left held, while Azurite still answers


@pytest.fixture
def storage_env(azurite: libsupport.Azurite, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """AzureWebJobsStorage on the session's Azurite, containers of this test's own, one app
    (this folder, as a local host sees it), every request counted."""
    suffix = uuid.uuid4().hex[:10]
    monkeypatch.delenv("WEBSITE_INSTANCE_ID", raising=False)
    monkeypatch.delenv("BLOBSINGLETON_NAMESPACE", raising=False)
    monkeypatch.setenv("AzureWebJobsScriptRoot", str(HERE))
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    monkeypatch.setenv("LEASE_CONTAINER", f"locks-{suffix}")
    monkeypatch.setenv("RUNONCE_CONTAINER", f"runonce-{suffix}")
    previous = dict(_connection._default_options)
    set_client_options(**{**previous, "raw_request_hook": libsupport.request_counter})
    try:
        yield azurite.connection_string
    finally:
        set_client_options(**previous)


@pytest.fixture
def subprocess_env(storage_env: str) -> dict[str, str]:
    """Environment for child processes: the same Azurite and containers, this library."""
    env = dict(os.environ)
    src = str(HERE.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, str(HERE), env.get("PYTHONPATH", "")]).rstrip(":")
    return env
