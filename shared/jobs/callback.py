"""POST a finished job's outcome to its callback URL, retrying what may succeed later.

    POST {callback_url}
    Idempotency-Key: {job_id}
    {"job_id": ..., "status": "succeeded"|"failed", "units_done": n, "units_failed": n,
     "failed_units": [...]}

2xx: delivered. 5xx, 408, 429, timeouts and connection errors: retried with exponential
backoff and jitter, JOB_CALLBACK_ATTEMPTS times, then `CallbackUnavailable` (the watcher
tries again later). Any other status (4xx, and 3xx: redirects are not followed, they could
point anywhere) is a refusal, returned, not retried. The URL is checked again before each
attempt and the connection goes to the very address that passed the check.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable

from shared.jobs.callback_url import CallbackTarget, Resolver, check_callback_url, resolve
from shared.jobs.config import BACKOFF_BASE, BACKOFF_CAP, JobSettings
from shared.jobs.errors import BlockedCallback, CallbackUnavailable, UnresolvableCallback
from shared.jobs.records import Announcement, AnnouncementState, Completion

log = logging.getLogger("shared.jobs.callback")

USER_AGENT = "batch-jobs-callback/1"
RETRIED_STATUSES = frozenset({408, 429})


def _open(addresses: tuple[str, ...], port: int, timeout: float) -> socket.socket:
    """A TCP connection to the first of the checked addresses that answers."""
    error: OSError | None = None
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout)
        except OSError as failure:
            error = failure
    raise error or OSError("no address to connect to")


class _PinnedConnection(http.client.HTTPConnection):
    """HTTP(S) to the checked addresses only; TLS still verifies the certificate of `host`."""

    def __init__(self, target: CallbackTarget, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._connect_timeout = timeout  # `self.timeout` is typed Optional by http.client
        self._addresses = target.addresses
        self._tls = ssl.create_default_context() if target.scheme == "https" else None

    def connect(self) -> None:
        sock = _open(self._addresses, self.port, self._connect_timeout)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock


def _send(
    target: CallbackTarget, body: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, str, str | None]:
    connection = _PinnedConnection(target, timeout)
    try:
        connection.request("POST", target.target, body=body, headers=headers)
        response = connection.getresponse()
        text = response.read(1024).decode("utf-8", "replace").strip()
        return response.status, text, response.getheader("Retry-After")
    finally:
        connection.close()


def backoff(attempt: int, retry_after: str | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based)."""
    if retry_after and retry_after.strip().isdigit():
        return min(BACKOFF_CAP, float(retry_after))
    return min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def post_callback(
    completion: Completion,
    settings: JobSettings,
    *,
    resolver: Resolver = resolve,
    sleep: Callable[[float], None] = time.sleep,
) -> Announcement:
    """Deliver the outcome: DELIVERED or REFUSED; `CallbackUnavailable` after every retry."""
    body = json.dumps(completion.callback_body(), separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": completion.job_id,
        "User-Agent": USER_AGENT,
    }
    reason = "not attempted"
    attempts = settings.callback_attempts
    for attempt in range(1, attempts + 1):
        retry_after: str | None = None
        try:
            target = check_callback_url(completion.callback_url, resolver=resolver)
            status, text, retry_after = _send(target, body, headers, settings.callback_timeout)
        except UnresolvableCallback as error:
            reason = str(error)
        except BlockedCallback as error:
            return Announcement(AnnouncementState.REFUSED, attempt, time.time(), None, str(error))
        except (OSError, http.client.HTTPException) as error:  # timeouts, refused, reset, TLS
            reason = f"{type(error).__name__}: {error}"
        else:
            if 200 <= status < 300:
                return Announcement(AnnouncementState.DELIVERED, attempt, time.time(), status)
            reason = f"HTTP {status}: {text[:300]}"
            if status < 500 and status not in RETRIED_STATUSES:
                if 300 <= status < 400:
                    reason += " (redirects are not followed)"
                return Announcement(AnnouncementState.REFUSED, attempt, time.time(), status, reason)
        log.warning(
            "callback of job %s, attempt %d of %d failed: %s",
            completion.job_id, attempt, attempts, reason,
        )  # fmt: skip
        if attempt < attempts:
            sleep(backoff(attempt, retry_after))
    raise CallbackUnavailable(completion.job_id, attempts, reason)
