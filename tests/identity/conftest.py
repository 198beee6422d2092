"""Azurite in OAuth mode over HTTPS, and the app's identity-based settings pointing at it.

No account key is set anywhere: `AzureWebJobsStorage` is unset and only the
`AzureWebJobsStorage__{blob,queue,table}ServiceUri` settings are, as on an app whose storage
account has shared-key access disabled. The token credential stands where
`DefaultAzureCredential` would (Entra ID cannot be reached from here): it mints tokens with the
issuer, audience and lifetime Azurite checks (Azurite does not check signatures).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blobsingleton
import blobsingleton.config
import pytest
from azure.core.credentials import AccessToken
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devhost import request_counting
from harness import services
from tests.support import AppSettings

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


class EntraLikeCredential:
    """A `TokenCredential` whose tokens look like Entra ID's to Azurite; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        self.calls += 1
        assert scopes == ("https://storage.azure.com/.default",), scopes
        now = int(time.time())
        claims = {"aud": "https://storage.azure.com", "iss": f"https://sts.windows.net/{TENANT}/",
                  "iat": now, "nbf": now - 60, "exp": now + 3600, "oid": str(uuid.uuid4()),
                  "tid": TENANT}  # fmt: skip

        def part(data: dict[str, object]) -> str:
            return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

        token = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"
        return AccessToken(token, now + 3600)

    def get_token_info(self, *scopes: str, **kwargs: object) -> object:
        from azure.core.credentials import AccessTokenInfo

        token = self.get_token(*scopes)
        return AccessTokenInfo(token.token, token.expires_on)


class AuthSchemes:
    """A response hook: the `Authorization` scheme each answered request was signed with."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, response: Any) -> None:
        header = response.http_request.headers.get("Authorization", "")
        self.seen.append(header.split(" ", 1)[0] or "(none)")


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, made for this run: nothing secret is committed."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="session")
def oauth_azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[services.Azurite]:
    tls = self_signed_certificate(tmp_path_factory.mktemp("azurite-tls"))
    with services.azurite(oauth_tls=tls) as instance:
        yield instance


@pytest.fixture
def auth_schemes() -> AuthSchemes:
    return AuthSchemes()


@pytest.fixture
def identity_env(
    oauth_azurite: services.Azurite, app_settings: AppSettings, auth_schemes: AuthSchemes
) -> Iterator[EntraLikeCredential]:
    """Identity-based settings only, an injected credential, and the test certificate trusted."""
    suffix = uuid.uuid4().hex[:10]
    app_settings.set(
        {
            "AzureWebJobsStorage": None,
            "AzureWebJobsStorage__accountName": None,
            **{
                f"AzureWebJobsStorage__{service}ServiceUri": oauth_azurite.service_url(service)
                for service in ("blob", "queue", "table")
            },
            "LEASE_CONTAINER": f"locks-{suffix}",
            "RUNONCE_CONTAINER": f"runonce-{suffix}",
            "EMAIL_OUTBOX_CONTAINER": f"outbox-{suffix}",
        }
    )
    credential = EntraLikeCredential()
    assert oauth_azurite.certificate is not None
    blobsingleton.config.set_default_credential(credential)
    blobsingleton.config.set_client_options(
        raw_request_hook=request_counting.request_counter,
        raw_response_hook=auth_schemes,
        connection_verify=str(oauth_azurite.certificate),
    )
    try:
        yield credential
        # Every request the test sent was signed with a token, none with the account key.
        assert auth_schemes.seen and set(auth_schemes.seen) == {"Bearer"}, set(auth_schemes.seen)
    finally:
        blobsingleton.config.set_default_credential(None)
        request_counting.install()
