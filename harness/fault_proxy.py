"""A seeded fault-injecting TCP proxy between the app instances and Azurite.

The chaos run puts it in front of each Azurite port so the app sees the network faults real
storage shows: connection resets, stalls longer than the client's timeout, and added latency.
Each new connection draws its fate from one seeded RNG, so the same seed and the same order
of connections give the same faults; counts of each fault are kept for the chaos JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

#: The fault kinds a connection can draw, in the order the RNG weighs them.
FAULT_KINDS = ("reset", "stall", "latency")


@dataclass(frozen=True)
class FaultRates:
    """Probability per new connection of each fault; the rest pass through untouched."""

    reset: float = 0.0
    stall: float = 0.0
    latency: float = 0.0
    stall_seconds: float = 40.0  # set it above the read timeout the app's clients use
    latency_seconds: float = 0.2

    def __post_init__(self) -> None:
        total = self.reset + self.stall + self.latency
        if min(self.reset, self.stall, self.latency) < 0 or total > 1:
            raise ValueError(f"fault rates must be >= 0 and sum to <= 1, got {total}")


@dataclass
class FaultProxy:
    """Forwards 127.0.0.1:`listen_port` to 127.0.0.1:`target_port`, injecting seeded faults."""

    target_port: int
    rates: FaultRates
    seed: int
    listen_port: int = 0
    counts: Counter[str] = field(default_factory=Counter)
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
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += getattr(self.rates, kind)
            if roll < edge:
                return kind
        return None

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
            target_r, target_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:  # the target is down (Azurite restarting): the client sees a reset
            client_w.transport.abort()
            return
        await asyncio.gather(
            self._pipe(client_r, target_w, delay),
            self._pipe(target_r, client_w, 0.0),
            return_exceptions=True,
        )

    def start(self) -> FaultProxy:
        """Serve on a background thread; returns once the port is bound."""
        ready = threading.Event()

        async def serve() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port)
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
