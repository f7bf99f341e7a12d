"""A hostile or careless client over real HTTP: a request whose body never ends (with or
without the token) cannot hold a socket, a client gone mid-body writes no traceback, and
starts naming one run id at once get one run and ``run_exists`` for the others."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from runtime import Runtime
from runtime.server import ServerLimits, serve

from .support import AUTH, FUNCTIONS, QUICK, TOKEN, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@asynccontextmanager
async def _serving(tmp_path: Path) -> AsyncIterator[int]:
    """``serve`` (as ``magistrate serve`` runs it) on a free loopback port; yield the port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    limits = ServerLimits(max_connections=8, header_timeout=1.0, keep_alive=1.0)
    listening = asyncio.Event()
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        task = asyncio.create_task(
            serve(
                rt,
                graphs=[QUICK],
                port=port,
                token=TOKEN,
                limits=limits,
                announce=lambda _: listening.set(),
            )
        )
        try:
            await listening.wait()
            yield port
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


class _Records(logging.Handler):
    """The records of a logger that does not propagate (uvicorn's), kept for a test."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def _closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (the test's timeout
    bounds a server that never does)."""
    return await reader.read()


async def _settled(idle: int) -> None:
    """Until this loop runs no more tasks than ``idle`` (the server's request tasks ended)."""
    while True:
        if len(asyncio.all_tasks()) <= idle:
            return
        await asyncio.sleep(0.01)


async def test_a_body_that_never_ends_cannot_hold_a_socket(tmp_path: Path) -> None:
    """A head naming a long body, then a byte now and then: refused (401) or read, the
    connection is closed once its time is up, and the log holds no traceback."""
    log = _Records()
    async with _serving(tmp_path) as port:
        logging.getLogger("uvicorn.error").addHandler(log)  # uvicorn set its loggers up by now
        idle = len(asyncio.all_tasks())
        head = (
            b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n"
        )
        # Without the token: answered 401 at once; the body it still owes kept the socket.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + b"\r\n")
        answer = await reader.readuntil(b"}")
        assert answer.startswith(b"HTTP/1.1 401"), answer[:100]
        writer.write(b"{")
        await writer.drain()
        assert await _closed_by_server(reader) == b""
        writer.close()
        # With the token: the handler waits for a body that never comes.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode() + b'{"graph"')
        await writer.drain()
        await _closed_by_server(reader)
        writer.close()
        await _settled(idle)
        # The server answers as before, and nothing started.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            listed = await client.get("/api/runs")
        assert listed.status_code == 200, listed.text
        assert listed.json()["runs"] == []
    # A client that left mid-body is not a bug of the server's: no traceback, no error.
    logging.getLogger("uvicorn.error").removeHandler(log)
    noisy = [r for r in log.records if r.levelno >= logging.ERROR or r.exc_info]
    assert noisy == [], [r.getMessage() for r in noisy]


async def test_starts_naming_one_run_id_at_once_start_it_once(tmp_path: Path) -> None:
    """A client that retries a start (its run id makes the start safe to retry) while the
    first is under way gets 409 ``run_exists``, as it would once the first is done: not
    503 (which says a retry may cure it) nor another code."""
    async with served(tmp_path / "runs.db") as s:
        for execute in ("server", "workers"):
            run_id = f"retried-{execute}"
            answers = await asyncio.gather(
                *(
                    s.client.post(
                        "/api/runs",
                        json={"graph": "quick", "run_id": run_id, "execute": execute},
                        headers=AUTH,
                    )
                    for _ in range(5)
                )
            )
            codes = sorted(a.status_code for a in answers)
            assert codes == [201, 409, 409, 409, 409], [a.text for a in answers]
            for refused in (a.json() for a in answers if a.status_code == 409):
                assert refused == {
                    "error": "run_exists",
                    "detail": f"run {run_id} already exists",
                    "run_id": run_id,
                }
            events = await s.client.get(f"/api/runs/{run_id}/events", params={"type": "run."})
            types = [e["type"] for e in events.json()["events"]]
            assert types.count("run.started") == 1, types
