"""Clients the library builds skip `requests`' per-request reading of the environment where what
it would find can be given once: a CA bundle is still used, a proxy set in the environment is
still used (and keeps the reading), a netrc file keeps it too."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
import requests.sessions
from azure.core.exceptions import ServiceRequestError
from blobsingleton._connection import StorageAccount, requests_environment


def _clean_environment(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                                       "NETRC"):  # fmt: skip
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))


def _requests_seen(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[Any]]:
    """The URLs whose proxies `requests` looked up in the environment, and the `verify` each
    request was sent with."""
    lookups: list[str] = []
    verify: list[Any] = []
    lookup, request = requests.sessions.get_environ_proxies, requests.Session.request

    def counted(url: str, no_proxy: Any = None) -> Any:
        lookups.append(url)
        return lookup(url, no_proxy=no_proxy)

    def seen(self: requests.Session, method: str, url: str, **options: Any) -> Any:
        verify.append(options.get("verify"))
        return request(self, method, url, **options)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    monkeypatch.setattr(requests.Session, "request", seen)
    return lookups, verify


def _container(connection_string: str, **options: Any) -> Any:
    account = StorageAccount(connection_string, client_options=options)
    return account.blob_service().get_container_client(f"environment-{uuid.uuid4().hex[:8]}")


def test_without_proxy_settings_a_request_does_not_read_the_environment(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    assert requests_environment() == {"use_env_settings": False}
    lookups, verify = _requests_seen(monkeypatch)
    _container(storage_env).exists()
    assert lookups == [] and verify == [True]


def test_a_ca_bundle_in_the_environment_is_still_used(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    bundle = tmp_path / "ca.pem"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    lookups, verify = _requests_seen(monkeypatch)
    _container(storage_env).exists()
    assert lookups == [] and verify == [str(bundle)]  # given once, as requests would have
    _container(storage_env, connection_verify=False).exists()
    assert verify[-1] is False  # the application's own choice stands


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
    assert requests_environment() is None
    with pytest.raises(ServiceRequestError):  # the proxy, not Azurite, was asked: refused
        _container(storage_env, retry_total=0).exists()


def test_a_netrc_file_keeps_the_environment_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    assert requests_environment() is not None
    (tmp_path / ".netrc").write_text("machine example.invalid login a password b\n")
    assert requests_environment() is None
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("NETRC", str(tmp_path / "elsewhere"))
    assert requests_environment() is None


def test_an_accounts_repr_never_shows_its_key() -> None:
    key = "c2VjcmV0LWFjY291bnQta2V5"
    account = StorageAccount(
        connection_string=f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={key}",
        credential={"account_name": "a", "account_key": key},
    )
    assert key not in repr(account) and key not in str(account)
