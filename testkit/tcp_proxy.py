"""A TCP forwarder on 127.0.0.1 with switchable faults, for Kafka (or anything) behind it.

The proxy runs its own event loop in a daemon thread, so tests drive it with plain method calls:
`cut()` resets every open connection, `refuse(True)` closes new ones at once (the service looks
down), `refuse(False)` lets them through again. `blackhole(True)` forwards nothing while connections stay open
and new ones are still accepted (a dropped route or a frozen firewall: requests get no answer, no error either);
`blackhole(False)` lets what waited through, as TCP's retransmissions would. For Kafka the broker must advertise
the proxy's port (KafkaBroker(advertised_port=...)), or clients bypass it after the first metadata answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from testkit.ports import HOST, free_port
from testkit.processes import StartStop


class TcpProxy(StartStop):
    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.port = port if port is not None else free_port()
        self.target_port = target_port
        self.connections_accepted = 0
        self._refusing = False
        self._flowing = asyncio.Event()  # cleared while blackholed
        self._flowing.set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[asyncio.Task[None]] = set()  # each accepted connection's task

    @property
    def is_running(self) -> bool:
        return self._server is not None

    def start(self) -> TcpProxy:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(asyncio.start_server(self._accept, HOST, self.port))
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"tcp-proxy-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return
        self._call(self._shutdown())
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._server = None

    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        result: int = self._call(self._cut())
        return result

    def refuse(self, refusing: bool) -> None:
        """While True, every new connection is closed as soon as it is accepted."""
        self._refusing = refusing

    def blackhole(self, on: bool) -> None:
        """While True, connections (open and new) are kept and accepted but nothing is forwarded either way; what
        was sent meanwhile goes through once it is False again."""
        flowing = self._flowing
        switch = flowing.clear if on else flowing.set
        loop = self._loop
        if loop is None or not loop.is_running():
            switch()
        else:
            loop.call_soon_threadsafe(switch)

    # -- event-loop side -----------------------------------------------------------------------

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _cut(self) -> int:
        writers = list(self._writers)
        for writer in writers:
            _reset(writer)
        return len(writers)

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._cut()
        # Connections waiting out a blackhole (or still piping) end with the proxy, not with the interpreter.
        tasks = [task for task in self._connections if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        # Cancelled by stop(): ends quietly (asyncio's server logs a connection task that ends cancelled).
        with contextlib.suppress(asyncio.CancelledError):
            await self._forward(reader, writer)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            _reset(writer)
            return
        self._writers.add(writer)
        try:
            await self._flowing.wait()  # a blackholed route: accepted, but no upstream until it is lifted
            upstream_reader, upstream_writer = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            self._writers.discard(writer)
            _reset(writer)
            return
        self._writers.add(upstream_writer)
        try:
            await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))
        finally:
            for w in (writer, upstream_writer):
                self._writers.discard(w)
                _reset(w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                await self._flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()  # read just before the blackhole: held with the rest
                writer.write(data)
                await writer.drain()
        _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a crashed peer or a dropped route would look."""
    import socket
    import struct

    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.close()
