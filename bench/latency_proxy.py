"""A TCP proxy that delays every byte by a fixed time each way: a network round trip at the
socket, for a kernel without netem.

Each direction reads what arrives, stamps it with when it may leave (now + one-way delay) and
a writer sends it then, in order. A request/response exchange therefore gains one full round
trip, however many bytes it has, like a real link (bandwidth is not limited).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(65536)
            await queue.put((time.monotonic() + delay, data))
            if not data:
                break
    except OSError:
        await queue.put((0.0, b""))
    await sender


async def _serve(
    target: tuple[str, int], one_way: float, started: threading.Event, port: list[int],
    stop: asyncio.Event,
) -> None:  # fmt: skip
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        with contextlib.suppress(asyncio.CancelledError):  # the proxy is stopping
            await asyncio.gather(
                _pipe(client_r, server_w, one_way), _pipe(server_r, client_w, one_way),
                return_exceptions=True,
            )  # fmt: skip

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port.append(server.sockets[0].getsockname()[1])
    started.set()
    async with server:
        await stop.wait()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:  # connections still open: end them with the proxy
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


@contextlib.contextmanager
def latency_proxy(target_host: str, target_port: int, rtt_s: float) -> Iterator[int]:
    """Listen on a free loopback port for the block, forwarding to the target with `rtt_s`
    added per round trip (half each way); yields the port."""
    loop = asyncio.new_event_loop()
    started, port = threading.Event(), []
    stop = asyncio.Event()
    thread = threading.Thread(
        target=loop.run_until_complete,
        args=(_serve((target_host, target_port), rtt_s / 2, started, port, stop),),
        daemon=True,
        name="latency-proxy",
    )
    thread.start()
    if not started.wait(10):
        raise RuntimeError("latency proxy did not start")
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)
