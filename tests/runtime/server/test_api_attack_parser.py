"""Requests ``magistrate serve``'s HTTP parser refuses before the app sees them (a run id
too long for a request head, a request line that is not HTTP) are answered in the API's
error shape, as JSON, like every other refusal."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from runtime import Runtime
from runtime.server import ServerLimits, serve

from .support import FUNCTIONS, QUICK

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()  # the server closes the connection after a 400
    finally:
        writer.close()


async def test_requests_the_parser_refuses_get_the_api_error_shape(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    limits = ServerLimits(max_header_bytes=4096)
    listening = asyncio.Event()
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        task = asyncio.create_task(
            serve(rt, graphs=[QUICK], port=port, limits=limits, announce=lambda _: listening.set())
        )
        try:
            await listening.wait()
            # A head past the limit, still incomplete: refused without waiting for its end.
            long_id = b"x" * 5000
            for request in (
                b"GET /api/runs/" + long_id + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                b"NOT HTTP AT ALL\r\n\r\n",
            ):
                answer = await _exchange(port, request)
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 400"), answer[:200]
                assert b"content-type: application/json" in head.lower(), head
                assert body.startswith(b'{"error":"bad_request","detail":"'), body
                assert b"4096 bytes" in body, body
            # The server still answers well-formed requests.
            fine = await _exchange(
                port, b"GET /api/graphs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            assert fine.startswith(b"HTTP/1.1 200"), fine[:200]
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
