"""Clients the library builds skip `requests`' per-request reading of the environment only where
the environment holds nothing it would find: a proxy set in the environment is still used."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests.sessions
from azure.core.exceptions import ServiceRequestError
from blobsingleton._connection import StorageAccount, environment_shapes_requests


def _clean_environment(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                                       "NETRC"):  # fmt: skip
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))


def _environment_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    original = requests.sessions.get_environ_proxies

    def counted(url: str, no_proxy: Any = None) -> Any:
        reads.append(url)
        return original(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    return reads


def test_without_proxy_settings_a_request_does_not_read_the_environment(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    assert not environment_shapes_requests()
    reads = _environment_reads(monkeypatch)
    container = StorageAccount(storage_env).blob_service().get_container_client("environment")
    container.exists()
    assert reads == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


@pytest.mark.parametrize("variable", ["http_proxy", "ALL_PROXY"])
def test_a_proxy_in_the_environment_is_still_used(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    monkeypatch.setenv(variable, f"http://127.0.0.1:{_closed_port()}")
    assert environment_shapes_requests()
    account = StorageAccount(storage_env, client_options={"retry_total": 0})
    container = account.blob_service().get_container_client(f"proxied-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ServiceRequestError):  # the proxy, not Azurite, was asked: refused
        container.exists()


def test_a_netrc_file_keeps_the_environment_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    assert not environment_shapes_requests()
    (tmp_path / ".netrc").write_text("machine example.invalid login a password b\n")
    assert environment_shapes_requests()
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "ca.pem"))
    assert environment_shapes_requests()
