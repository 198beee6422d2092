"""POST a finished job's outcome to its callback URL, retrying what may succeed later.

    POST {callback_url}
    Idempotency-Key: {job_id}
    {"job_id": ..., "status": "succeeded"|"failed", "units_done": n, "units_failed": n,
     "failed_units": [...]}

2xx: delivered. 5xx, 408, 429, timeouts and connection errors: retried with exponential
backoff and jitter, up to JOB_CALLBACK_ATTEMPTS times, then `CallbackUnavailable` (the
watcher tries again later). Any other status (4xx, and 3xx: redirects are not followed, they
could point anywhere) is a refusal, returned, not retried. The URL is checked again before
each attempt (shared.jobs.callback_url) and the connection goes to the very address that
passed the check.

Deadlines are wall-clock. One attempt (resolving the name, connecting, TLS, sending, and the
answer's status line and headers) ends after JOB_CALLBACK_TIMEOUT seconds whatever the
receiver does: a watchdog shuts the socket, so a receiver that dribbles one byte every few
seconds is cut like one that says nothing. All attempts of one announcement, backoff
included, end within JOB_CALLBACK_DEADLINE seconds.

Only the status code of the answer is kept: its body is never read, stored, returned or
logged (it could be an internal service's error page), and a failure is recorded as a
category ("no answer within 10 s", "connection failed"), never with the receiver's words.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable

from shared.jobs.callback_url import CallbackTarget, Resolver, check_callback_url, resolve
from shared.jobs.config import BACKOFF_BASE, BACKOFF_CAP, JobSettings
from shared.jobs.errors import BlockedCallback, CallbackUnavailable, UnresolvableCallback
from shared.jobs.records import Announcement, AnnouncementState, Completion

log = logging.getLogger("shared.jobs.callback")

USER_AGENT = "batch-jobs-callback/1"
RETRIED_STATUSES = frozenset({408, 429})


class _Deadline(Exception):
    """The attempt's wall-clock deadline passed."""


def _open(addresses: tuple[str, ...], port: int, ends: float) -> socket.socket:
    """A TCP connection to the first of the checked addresses that answers before `ends`."""
    error: OSError | None = None
    for address in addresses:
        remaining = ends - time.monotonic()
        if remaining <= 0:
            raise _Deadline
        try:
            return socket.create_connection((address, port), remaining)
        except OSError as failure:
            error = failure
    raise error or OSError("no address to connect to")


class _PinnedConnection(http.client.HTTPConnection):
    """HTTP(S) to the checked addresses only; TLS still verifies the certificate of `host`.
    `abort()` (the watchdog) shuts the socket from another thread: whatever this connection
    is blocked on returns at once."""

    def __init__(self, target: CallbackTarget, ends: float) -> None:
        super().__init__(target.host, target.port, timeout=max(ends - time.monotonic(), 0.01))
        self._ends = ends
        self._addresses = target.addresses
        self._tls = ssl.create_default_context() if target.scheme == "https" else None
        self._raw: socket.socket | None = None
        self._lock = threading.Lock()
        self.aborted = False

    def connect(self) -> None:
        raw = _open(self._addresses, self.port, self._ends)
        with self._lock:
            self._raw = raw
            if self.aborted:
                raw.close()
                raise _Deadline
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host) if self._tls else raw

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            if self._raw is not None:
                # the plain socket's shutdown, under TLS too: no TLS state is touched; an
                # OSError means it is closed already
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self._raw, socket.SHUT_RDWR)


def _send(
    target: CallbackTarget, body: bytes, headers: dict[str, str], ends: float
) -> tuple[int, str | None]:
    """The answer's status and Retry-After header; its body is never read."""
    connection = _PinnedConnection(target, ends)
    watchdog = threading.Timer(max(ends - time.monotonic(), 0.0), connection.abort)
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("POST", target.target, body=body, headers=headers)
        response = connection.getresponse()  # the status line and headers only
        return response.status, response.getheader("Retry-After")
    except (OSError, http.client.HTTPException):
        if connection.aborted or time.monotonic() >= ends:
            raise _Deadline from None
        raise
    finally:
        watchdog.cancel()
        connection.close()


def backoff(attempt: int, retry_after: str | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based)."""
    if retry_after and retry_after.strip().isdigit():
        return min(BACKOFF_CAP, float(retry_after))
    return min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def _failure(error: BaseException) -> str:
    """A failure's category for the record: never what the receiver said."""
    if isinstance(error, http.client.HTTPException):
        return f"not an HTTP answer ({type(error).__name__})"
    return f"connection failed ({type(error).__name__})"


def post_callback(
    completion: Completion,
    settings: JobSettings,
    *,
    resolver: Resolver = resolve,
    sleep: Callable[[float], None] = time.sleep,
) -> Announcement:
    """Deliver the outcome: DELIVERED or REFUSED; `CallbackUnavailable` after every retry or
    at the announcement's deadline."""
    body = json.dumps(completion.callback_body(), separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": completion.job_id,
        "User-Agent": USER_AGENT,
    }
    started = time.monotonic()
    deadline = started + settings.callback_deadline
    reason = "not attempted"
    failures: list[str] = []
    attempts = settings.callback_attempts
    attempt = 0
    for attempt in range(1, attempts + 1):
        retry_after: str | None = None
        ends = min(time.monotonic() + settings.callback_timeout, deadline)
        try:
            target = check_callback_url(
                completion.callback_url,
                resolver=resolver,
                policy=settings.callback_policy,
                seconds=max(ends - time.monotonic(), 0.01),
            )
            status, retry_after = _send(target, body, headers, ends)
        except UnresolvableCallback as error:
            reason = str(error)
        except BlockedCallback as error:
            return Announcement(AnnouncementState.REFUSED, attempt, time.time(), None, str(error))
        except _Deadline:
            reason = f"no answer within {settings.callback_timeout:g} s"
        except (OSError, http.client.HTTPException) as error:  # refused, reset, TLS
            reason = _failure(error)
        else:
            if 200 <= status < 300:
                return Announcement(AnnouncementState.DELIVERED, attempt, time.time(), status)
            reason = f"HTTP {status}"
            if status < 500 and status not in RETRIED_STATUSES:
                if 300 <= status < 400:
                    reason += " (redirects are not followed)"
                return Announcement(AnnouncementState.REFUSED, attempt, time.time(), status, reason)
        failures.append(reason)
        if attempt == attempts:
            break
        wait = backoff(attempt, retry_after)
        if time.monotonic() + wait >= deadline:
            reason += f"; the announcement's deadline ({settings.callback_deadline:g} s) came"
            break
        sleep(wait)
    log.warning(
        "callback of job %s failed %d time(s) in %.1f s: %s",
        completion.job_id, attempt, time.monotonic() - started, "; ".join(failures),
    )  # fmt: skip
    raise CallbackUnavailable(completion.job_id, attempt, reason)
