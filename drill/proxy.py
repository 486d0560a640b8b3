"""A TCP proxy the drill can blackhole: one worker's route to the api-server's execution API.

A partitioned worker is simulated by sending its execution-API traffic (``[core]
execution_api_server_url``) through this proxy and then dropping it: while blackholed, bytes in
either direction are read and discarded and new connections are accepted but never forwarded, as
a network that silently loses packets would (no reset, no refusal: the client's own timeouts and
retries decide when it gives up). The worker's other routes — the warehouse, the store, the
vendors, the broker — do not go through it and stay up. ``heal()`` forwards again; connections
held during the partition stay dead, as after a real partition, and clients reconnect.

It runs an asyncio loop on a daemon thread of the drill's own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from drill.airflow_home import free_port

__all__ = ["BlackholeProxy"]


class BlackholeProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`blackhole` / :meth:`heal` toggle the partition."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.blackholed = threading.Event()
        #: Connections accepted while blackholed (each one a request that went nowhere).
        self.dropped_connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._generation = 0
        self._ready = threading.Event()
        #: Strong references: asyncio keeps only weak ones to the connection handlers' tasks.
        self._handlers: set[asyncio.Task[None]] = set()
        #: Every open stream, closed when the proxy stops (no transport is left for the GC).
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BlackholeProxy:
        self._thread = threading.Thread(target=self._run, name="drill-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the drill's TCP proxy did not start")
        return self

    def blackhole(self) -> None:
        """From now on, nothing passes; connections open now go silent too."""
        self._generation += 1
        self.blackholed.set()

    def heal(self) -> None:
        """Forward new connections again (those opened during the partition stay silent)."""
        self.blackholed.clear()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            # Closed streams end their handlers (EOF); cancel only what is still running after that.
            tasks = asyncio.all_tasks(loop)
            if tasks:
                _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=2.0))
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        self._writers.add(writer)
        try:
            if self.blackholed.is_set():
                self.dropped_connections += 1
                await self._swallow(reader)
                return
            generation = self._generation
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers.add(up_writer)
            try:
                await asyncio.gather(
                    self._pipe(reader, up_writer, generation),
                    self._pipe(up_reader, writer, generation),
                    return_exceptions=True,
                )
            finally:
                self._writers.discard(up_writer)
                await self._close(up_writer)
        finally:
            self._writers.discard(writer)
            await self._close(writer)

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, generation: int
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if self.blackholed.is_set() or generation != self._generation:
                await self._swallow(reader)  # the partition cut this connection: nothing passes any more
                return
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(Exception):
            writer.write_eof()

    @staticmethod
    async def _swallow(reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass
