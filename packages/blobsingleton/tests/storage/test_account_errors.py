"""A storage account that refuses the credentials, or a connection string that cannot be read:
one library error naming the app setting and the account (`CredentialsRefused`,
`InvalidConnectionString`, both `StorageAccountError`), never the SDK's HttpResponseError or
ValueError, never a key, and no log line before it. Against Azurite with a wrong key."""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from azure.core.exceptions import ClientAuthenticationError
from blobsingleton import BlobLease, once
from blobsingleton.config import from_settings
from blobsingleton.errors import (
    CredentialsRefused,
    InvalidConnectionString,
    StorageAccountError,
    StorageUnavailable,
)
from blobsingleton.ops import list_locks

#: A valid base64 key that is not the account's.
WRONG_KEY = "QUJD" * 22


def with_key(connection_string: str, key: str) -> str:
    return re.sub(r"AccountKey=[^;]+", f"AccountKey={key}", connection_string)


def assert_one_error(error: BaseException, setting: str, account: str) -> None:
    assert isinstance(error, StorageAccountError)
    assert error.setting == setting and error.account == account
    assert setting in str(error) and repr(account) in str(error)
    assert error.__cause__ is None and error.__suppress_context__  # the SDK's is not chained
    assert WRONG_KEY not in str(error) and "AccountKey" not in str(error).replace(
        "its AccountKey is not base64", ""
    )


def test_a_wrong_key_is_refused_naming_the_setting_and_the_account_once_and_singleton(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", with_key(storage_env, WRONG_KEY))
    monkeypatch.setenv("BLOBSINGLETON_NAMESPACE", "account-errors")
    ran: list[str] = []

    @once("email-{event_id}")
    def send(event_id: str) -> None:
        ran.append(event_id)

    with (
        caplog.at_level(logging.DEBUG, logger="blobsingleton"),
        pytest.raises(CredentialsRefused) as refused,
    ):
        send(f"e-{uuid.uuid4().hex[:6]}")
    assert_one_error(refused.value, "AzureWebJobsStorage", "devstoreaccount1")
    assert isinstance(refused.value, PermissionError)
    assert "AuthorizationFailure" in str(refused.value) or "AuthenticationFailed" in str(
        refused.value
    )
    assert ran == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    with pytest.raises(CredentialsRefused) as refused:
        BlobLease("import-acme").acquire()
    assert_one_error(refused.value, "AzureWebJobsStorage", "devstoreaccount1")


def test_another_setting_is_named_as_its_own(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OrdersStorage", with_key(storage_env, WRONG_KEY))
    with pytest.raises(CredentialsRefused) as refused:
        BlobLease("import-acme", storage=from_settings("OrdersStorage")).acquire()
    assert_one_error(refused.value, "OrdersStorage", "devstoreaccount1")


def test_a_malformed_connection_string_is_refused_naming_the_setting(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", "this is not a connection string")

    @once("email-{event_id}")
    def send(event_id: str) -> None:
        raise AssertionError("never runs")

    with pytest.raises(InvalidConnectionString) as invalid:
        send("e1")
    assert_one_error(invalid.value, "AzureWebJobsStorage", "unknown")
    assert isinstance(invalid.value, ValueError)


def test_a_key_that_is_not_base64_is_refused_before_any_request(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK finds it only when signing, as a ClientAuthenticationError that would read as
    storage being unavailable."""
    monkeypatch.setenv("AzureWebJobsStorage", with_key(storage_env, "not*base64"))
    with pytest.raises(InvalidConnectionString, match="AccountKey is not base64") as invalid:
        BlobLease("import-acme").acquire()
    assert_one_error(invalid.value, "AzureWebJobsStorage", "devstoreaccount1")
    with pytest.raises(InvalidConnectionString):
        list(list_locks())


def test_an_identity_without_a_token_is_refused_not_unavailable() -> None:
    """A credential that cannot get a token raises ClientAuthenticationError, with no response
    (no status): refused, not StorageUnavailable (which a caller would retry)."""
    from blobsingleton._storage_errors import unavailable_as

    with pytest.raises(CredentialsRefused) as refused, unavailable_as("acquire"):
        raise ClientAuthenticationError("ManagedIdentityCredential: no identity endpoint")
    assert not isinstance(refused.value, StorageUnavailable)
    assert "ClientAuthenticationError" in str(refused.value)


def test_the_operators_listing_is_refused_the_same_way(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", with_key(storage_env, WRONG_KEY))
    with pytest.raises(CredentialsRefused) as refused:
        list(list_locks())
    assert_one_error(refused.value, "AzureWebJobsStorage", "devstoreaccount1")


def test_a_deferral_is_refused_the_same_way(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Busy.DEFER's re-enqueue goes to the same account's queue service."""
    from blobsingleton._queues import send_message

    monkeypatch.setenv("AzureWebJobsStorage", with_key(storage_env, WRONG_KEY))
    with pytest.raises(CredentialsRefused) as refused:
        send_message(from_settings(), f"defer-{uuid.uuid4().hex[:8]}", b"{}")
    assert_one_error(refused.value, "AzureWebJobsStorage", "devstoreaccount1")
