"""A seeded fault-injecting proxy between the app instances and Azurite.

The chaos run puts one in front of each Azurite service so the app sees the faults real
storage shows. Per connection: resets, stalls longer than the client's timeout, and added
latency. Per request, the answers Azure gives under load (`azure_errors.py`): `503
ServerBusy` without forwarding the request, and `500 OperationTimedOut` or `500
InternalError` after forwarding it (the request landed; its answer is replaced), so the
client learns nothing of what happened. For those the proxy speaks HTTP/1.1 request by
request on kept-alive connections, as the SDK's transport reuses them (`http_messages.py`).

Each new connection, and each request when per-request faults are on, draws its fate from
one seeded RNG: the same seed and the same order of connections and requests give the same
faults. Counts of each fault are kept for the chaos JSON, and every server error injected is
noted (`injected`: when, which request, what storage answered underneath).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from harness.azure_errors import SERVER_ERRORS, error_response
from harness.http_messages import MAX_HEAD, MalformedMessage, Message, read_request, read_response

#: The fault kinds a connection can draw, in the order the RNG weighs them.
FAULT_KINDS = ("reset", "stall", "latency")
#: The server errors a request can draw, in the order the RNG weighs them.
SERVER_ERROR_KINDS = tuple(SERVER_ERRORS)
#: Noted server errors kept at most (the counts go on past it).
MAX_NOTED = 100_000


@dataclass(frozen=True)
class FaultRates:
    """Probability per new connection of each network fault, and per request of each server
    error (`SERVER_ERROR_KINDS`); the rest pass through untouched."""

    reset: float = 0.0
    stall: float = 0.0
    latency: float = 0.0
    stall_seconds: float = 40.0  # set it above the read timeout the app's clients use
    latency_seconds: float = 0.2
    server_busy: float = 0.0  # 503 ServerBusy, the request not forwarded
    operation_timed_out: float = 0.0  # 500 OperationTimedOut after the request landed
    internal_error: float = 0.0  # 500 InternalError after the request landed

    def __post_init__(self) -> None:
        for kinds, per in ((FAULT_KINDS, "connection"), (SERVER_ERROR_KINDS, "request")):
            rates = [getattr(self, kind) for kind in kinds]
            if min(rates) < 0 or sum(rates) > 1:
                raise ValueError(
                    f"fault rates per {per} must be >= 0 and sum to <= 1, got {sum(rates)}"
                )

    @property
    def per_request(self) -> bool:
        """Whether requests draw server errors (the proxy then reads HTTP)."""
        return any(getattr(self, kind) for kind in SERVER_ERROR_KINDS)


#: Shorthands a run's rates may use: `503` is ServerBusy; `500` is split evenly between
#: OperationTimedOut and InternalError (both mean "it may have completed").
RATE_ALIASES = {"503": ("server_busy",), "500": ("operation_timed_out", "internal_error")}


def parse_rates(text: str, defaults: FaultRates | None = None) -> FaultRates:
    """`reset=0.1,503=0.03,500=0.03` on top of `defaults` (names: `FAULT_KINDS`,
    `SERVER_ERROR_KINDS`, or `RATE_ALIASES`); ValueError naming what is wrong."""
    base = defaults or FaultRates()
    values = asdict(base)
    for part in (p for p in text.split(",") if p.strip()):
        name, sep, raw = (x.strip() for x in part.partition("="))
        kinds = RATE_ALIASES.get(name) or ((name,) if name in (*FAULT_KINDS, *SERVER_ERROR_KINDS)
                                           else ())  # fmt: skip
        if not kinds or not sep:
            known = ", ".join((*FAULT_KINDS, *SERVER_ERROR_KINDS, *RATE_ALIASES))
            raise ValueError(f"unknown fault {name!r} (known: {known})")
        try:
            rate = float(raw)
        except ValueError:
            raise ValueError(f"fault {name}: {raw!r} is not a probability") from None
        for kind in kinds:
            values[kind] = rate / len(kinds)
    return FaultRates(**values)


@dataclass(frozen=True)
class InjectedError:
    """A server error the proxy answered: when (epoch s), to which request, and for one
    forwarded first, the status storage itself answered (what the client never saw)."""

    at: float
    service: str
    kind: str
    method: str
    path: str
    comp: str
    underlying_status: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _described(request: Message) -> tuple[str, str]:
    """(path, comp) of a request, for the record: the path without a Table entity's keys
    (values stay out of logs), and the `comp` / `restype` query naming the operation."""
    parts = urlsplit(request.target)
    path = parts.path.split("(", 1)[0]
    query = parse_qs(parts.query)
    comp = ",".join(query.get("comp", []) + query.get("restype", []))
    return path, comp


@dataclass
class FaultProxy:
    """Forwards 127.0.0.1:`listen_port` to 127.0.0.1:`target_port`, injecting seeded faults."""

    target_port: int
    rates: FaultRates
    seed: int
    listen_port: int = 0
    #: Which service is behind: how a server error is written ("blob", "queue", "table").
    service: str = "blob"
    #: Paths starting with one of these never draw a server error (a run spares a container).
    spare: tuple[str, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)
    #: Requests read while per-request faults were on (the denominator of their counts).
    requests: int = 0
    injected: list[InjectedError] = field(default_factory=list)
    _rng: random.Random = field(init=False)
    _enabled: bool = field(default=True, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    _server: asyncio.base_events.Server | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def set_enabled(self, enabled: bool) -> None:
        """Turn injection on or off (off: every connection passes through, RNG not drawn)."""
        with self._lock:
            self._enabled = enabled

    def draw(self) -> str | None:
        """The fault for the next connection, or None; one RNG draw per connection."""
        with self._lock:
            if not self._enabled:
                return None
            roll = self._rng.random()
        return self._kind_at(roll, FAULT_KINDS)

    @property
    def reads_requests(self) -> bool:
        """Whether the proxy reads each request (per-request faults on), or pipes bytes."""
        return self.rates.per_request

    def draw_request(self, request: Message) -> str | None:
        """The server error for this request, or None; one RNG draw per request, none for a
        spared path or while injection is off."""
        if self.spare and urlsplit(request.target).path.startswith(self.spare):
            return None
        with self._lock:
            if not self._enabled:
                return None
            self.requests += 1
            roll = self._rng.random()
        return self._kind_at(roll, SERVER_ERROR_KINDS)

    def _kind_at(self, roll: float, kinds: tuple[str, ...]) -> str | None:
        """The kind whose slice of [0, 1), laid end to end in `kinds`' order, holds `roll`."""
        edge = 0.0
        for kind in kinds:
            edge += getattr(self.rates, kind)
            if roll < edge:
                return kind
        return None

    async def _before_answer(self, request: Message, kind: str) -> None:
        """Called before a server error is answered (a test delays some answers here)."""

    def _note(self, kind: str, request: Message, underlying: int | None) -> None:
        path, comp = _described(request)
        noted = InjectedError(time.time(), self.service, kind, request.method, path, comp,
                              underlying)  # fmt: skip
        with self._lock:
            self.counts[kind] += 1
            if len(self.injected) < MAX_NOTED:
                self.injected.append(noted)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
    ) -> None:
        try:
            while data := await reader.read(65536):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve_connection(client_r, client_w)
        except asyncio.CancelledError:
            client_w.transport.abort()  # the proxy is stopping
        finally:
            self._handlers.discard(task)

    async def _serve_connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        fault = self.draw()
        if fault:
            with self._lock:
                self.counts[fault] += 1
        if fault == "reset":
            sock = client_w.get_extra_info("socket")
            if sock is not None:  # linger 0: the close sends RST, as a dropped connection does
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client_w.transport.abort()
            return
        if fault == "stall":
            with contextlib.suppress(Exception):
                await client_r.read(65536)  # swallow the request and answer nothing
                await asyncio.sleep(self.rates.stall_seconds)
            client_w.transport.abort()
            return
        delay = self.rates.latency_seconds if fault == "latency" else 0.0
        try:
            target_r, target_w = await asyncio.open_connection(
                "127.0.0.1", self.target_port, limit=MAX_HEAD
            )
        except OSError:  # the target is down (Azurite restarting): the client sees a reset
            client_w.transport.abort()
            return
        if self.reads_requests:
            try:
                await self._serve_requests(client_r, client_w, target_r, target_w, delay)
            except (ConnectionError, OSError, MalformedMessage, asyncio.IncompleteReadError):
                client_w.transport.abort()  # as the broken connection underneath would
            finally:
                with contextlib.suppress(Exception):
                    target_w.close()
                with contextlib.suppress(Exception):
                    client_w.close()
            return
        await asyncio.gather(
            self._pipe(client_r, target_w, delay),
            self._pipe(target_r, client_w, 0.0),
            return_exceptions=True,
        )

    async def _serve_requests(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        target_r: asyncio.StreamReader,
        target_w: asyncio.StreamWriter,
        delay: float,
    ) -> None:
        """Request by request: each draws its fate; a 503 is answered here, a 500 after the
        request was forwarded and storage answered it. An idle connection storage closes is
        closed to the client too, as the plain pipe does, so the client's pool opens a new
        one instead of sending into a dead one."""
        while True:
            request = await self._next_request(client_r, target_r)
            if request is None:
                return
            kind = self.draw_request(request)
            if kind is not None and not SERVER_ERRORS[kind].forwarded:
                self._note(kind, request, None)
                await self._before_answer(request, kind)
                client_w.write(error_response(kind, self.service, request))
                await client_w.drain()
                if not request.keeps_alive:
                    return
                continue
            if delay:
                await asyncio.sleep(delay)
            target_w.write(request.raw)
            await target_w.drain()
            response = await read_response(target_r, request.method)
            while response is not None and 100 <= response.status < 200:
                client_w.write(response.raw)  # an interim answer: the final one follows
                response = await read_response(target_r, request.method)
            if response is None:  # storage closed without answering: the client sees that
                client_w.transport.abort()
                return
            if kind is not None:
                self._note(kind, request, response.status)
                await self._before_answer(request, kind)
                client_w.write(error_response(kind, self.service, request))
            else:
                client_w.write(response.raw)
            await client_w.drain()
            if not (request.keeps_alive and response.keeps_alive):
                return

    @staticmethod
    async def _next_request(
        client_r: asyncio.StreamReader, target_r: asyncio.StreamReader
    ) -> Message | None:
        """The client's next request, or None when either side closes the idle connection."""
        ask = asyncio.ensure_future(read_request(client_r))
        closed = asyncio.ensure_future(target_r.read(1))
        try:
            await asyncio.wait({ask, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (closed, ask) if not ask.done() else (closed,):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task  # the reader is free again only once its read has ended
        if closed.done() and not closed.cancelled() and closed.result():
            raise MalformedMessage("storage sent bytes nobody asked for")
        return None if ask.cancelled() else ask.result()

    def start(self) -> FaultProxy:
        """Serve on a background thread; returns once the port is bound."""
        ready = threading.Event()

        async def serve() -> None:
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", self.listen_port, limit=MAX_HEAD
            )
            self.listen_port = self._server.sockets[0].getsockname()[1]
            ready.set()
            async with self._server:
                await self._server.serve_forever()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(serve())

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        """Close the listener and end the thread (open connections are dropped)."""
        loop = self._loop
        if loop is not None and self._server is not None:

            async def shut_down() -> None:
                assert self._server is not None
                handlers = list(self._handlers)
                for task in handlers:
                    task.cancel()
                await asyncio.gather(*handlers, return_exceptions=True)
                self._server.close()  # ends serve_forever, and with it the loop

            asyncio.run_coroutine_threadsafe(shut_down(), loop).result(10)
        if self._thread:
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
