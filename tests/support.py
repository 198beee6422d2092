"""Helpers every test folder shares: child processes' environment, the app indexed afresh,
per-test app settings, a transport that loses answers.

The fixtures built on them live in tests/conftest.py (`subprocess_env`, `app_functions`,
`app_settings`); the plain functions are for code that is not a fixture (module helpers).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blobsingleton
import pytest
from azure.core.exceptions import ServiceResponseError
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import BlobServiceClient, LinearRetry

from harness.azure_errors import SERVER_ERRORS
from harness.fault_proxy import FaultProxy
from harness.http_messages import Message

ROOT = Path(__file__).resolve().parent.parent
# The folder this process imported the library from: a child imports the same copy (a git
# worktree's own library rather than the one the virtual environment installed).
LIBRARY_PATH = Path(blobsingleton.__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    """The environment now (this test's settings included) for a child Python process that
    imports the repository's modules and this library, with unbuffered output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(LIBRARY_PATH)])
    return env


def forget_indexing(app: Any) -> None:
    """Put `app` (a FunctionApp) back as a fresh worker finds it.

    `get_functions()` indexes an app object once and refuses a second time (it remembers the
    names it has seen); a worker indexes once per process, and tests index many times.
    """
    app.functions_bindings = None


def fresh_functions(app: Any) -> dict[str, Any]:
    """The app's functions by name, indexed as a fresh worker indexes them."""
    forget_indexing(app)
    return {function.get_function_name(): function for function in app.get_functions()}


class AppSettings:
    """App settings (environment variables) that one test sets; undone after the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch

    def set(self, values: Mapping[str, str | None]) -> dict[str, str]:
        """Set each setting; None unsets it. Returns the ones set."""
        for name, value in values.items():
            if value is None:
                self._monkeypatch.delenv(name, raising=False)
            else:
                self._monkeypatch.setenv(name, value)
        return {name: value for name, value in values.items() if value is not None}


class LosesAnswers(RequestsTransport):
    """The real transport to the real Azurite; the next `times` requests `arm`ed for land
    there and their answers are lost (the connection reset while reading), as on a network
    that drops a connection: the SDK's retry policy then sends them again."""

    def __init__(self) -> None:
        super().__init__()
        self._matches: Callable[[Any], bool] = lambda request: False
        self._left = 0
        self.lost = 0

    def arm(self, matches: Callable[[Any], bool], times: int = 1) -> None:
        self._matches, self._left = matches, times

    def send(self, request: Any, **kwargs: Any) -> Any:
        if not (self._left and self._matches(request)):
            return super().send(request, **kwargs)
        self._left -= 1
        super().send(request, **kwargs).internal_response.close()
        self.lost += 1
        raise ServiceResponseError("connection reset by peer (injected)")


def blob_service_over(transport: RequestsTransport) -> BlobServiceClient:
    """A client of AzureWebJobsStorage through `transport` whose retries come at once (the
    SDK's default waits 15 s before the first)."""
    return BlobServiceClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], transport=transport,
        retry_policy=LinearRetry(backoff=0, random_jitter_range=0),
    )  # fmt: skip


@dataclass
class ScriptedProxy(FaultProxy):
    """A fault proxy in front of one Azurite service whose requests get the fates `arm`ed for
    them, in order (a server error kind of `harness.azure_errors.SERVER_ERRORS`), instead of
    drawing them: the tests' way to answer one exact request as Azure does under load."""

    script: list[tuple[Callable[[Message], bool], str, float]] = field(default_factory=list)
    #: Every request read, in order.
    seen: list[Message] = field(default_factory=list)
    _delays: dict[int, float] = field(default_factory=dict, init=False)

    @property
    def reads_requests(self) -> bool:
        return True

    def arm(self, kind: str, when: Callable[[Message], bool] = lambda request: True,
            times: int = 1, *, delay: float = 0.0) -> None:  # fmt: skip
        """The next `times` requests `when` accepts get `kind`, answered `delay` s late."""
        if kind not in SERVER_ERRORS:
            raise ValueError(f"unknown server error {kind!r}")
        with self._lock:
            self.script.extend([(when, kind, delay)] * times)

    def armed(self) -> int:
        with self._lock:
            return len(self.script)

    def draw_request(self, request: Message) -> str | None:
        with self._lock:
            self.requests += 1
            self.seen.append(request)
            for index, (when, kind, delay) in enumerate(self.script):
                if when(request):
                    del self.script[index]
                    self._delays[id(request)] = delay
                    return kind
        return None

    async def _before_answer(self, request: Message, kind: str) -> None:
        with self._lock:
            delay = self._delays.pop(id(request), 0.0)
        if delay:
            await asyncio.sleep(delay)


def writes_to(
    path_part: str, methods: tuple[str, ...] = ("PUT", "POST", "DELETE")
) -> Callable[[Message], bool]:
    """A request predicate: a write (by method) whose path contains `path_part`."""
    return lambda request: request.method in methods and path_part in request.target
