"""Requests the server refuses with a clear 4xx, over real HTTP: run ids a URL cannot name
(a final newline, dots only), bodies past the limit (refused before they are held), and a
method the runs path does not take (405 naming every method it does)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from runtime.server._params import MAX_BODY

from .support import AUTH, TOKEN, served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_run_ids_a_url_cannot_name_are_refused_and_start_nothing(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        for execute in ("here", "workers"):
            for run_id in ("z\n", ".", "..", "..."):
                answer = await s.client.post(
                    "/api/runs",
                    json={"graph": "quick", "run_id": run_id, "execute": execute},
                    headers=AUTH,
                )
                assert answer.status_code == 422, (run_id, answer.text)
                assert answer.json()["error"] == "invalid_body"
        assert (await s.client.get("/api/runs")).json()["runs"] == []
        dotted = await s.client.post(
            "/api/runs", json={"graph": "quick", "run_id": "a.b"}, headers=AUTH
        )
        assert dotted.status_code == 201, dotted.text
        assert (await s.client.get("/api/runs/a.b")).status_code == 200


async def test_a_declared_length_past_the_limit_is_answered_before_the_body(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        url = urlsplit(s.url)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        try:
            writer.write(
                (
                    "POST /api/runs HTTP/1.1\r\n"
                    f"Host: {url.netloc}\r\n"
                    f"Authorization: Bearer {TOKEN}\r\n"
                    "Content-Type: application/json\r\n"
                    f"Content-Length: {100 * MAX_BODY}\r\n\r\n"
                ).encode()
            )
            await writer.drain()
            # Not a byte of the body sent: the answer comes from the header alone.
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        finally:
            writer.close()
        assert head.startswith(b"HTTP/1.1 413"), head


async def test_a_streamed_body_past_the_limit_is_refused(tmp_path: Path) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
        nonlocal sent
        yield b'{"graph": "quick", "input": {"pad": "'
        while sent < 4 * MAX_BODY:
            sent += 1 << 16
            yield b"x" * (1 << 16)
        yield b'"}}'

    async with served(tmp_path / "runs.db") as s:
        answer = await s.client.post("/api/runs", content=chunks(), headers=AUTH)
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"] == "body_too_large"
        assert (await s.client.get("/api/runs")).json()["runs"] == []


async def test_a_wrong_method_on_the_runs_path_names_get_and_post(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        wrong = await s.client.delete("/api/runs", headers=AUTH)
        assert wrong.status_code == 405
        assert wrong.headers["allow"] == "GET, HEAD, POST"
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        assert started.status_code == 201, started.text
        listed = (await s.client.get("/api/runs")).json()["runs"]
        assert [r["run_id"] for r in listed] == [started.json()["run_id"]]


async def test_an_approval_that_names_nobody_is_refused_and_records_nothing(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        await s.wait_status(run_id, "paused")
        before = (await s.client.get(f"/api/runs/{run_id}/events")).json()
        for by in ("", "   ", None, 7):
            answer = await s.client.post(
                f"/api/runs/{run_id}/approve", json={"by": by, "input": {"ok": 1}}, headers=AUTH
            )
            assert answer.status_code == 422, (by, answer.text)
            assert answer.json()["error"] == "invalid_body"
        assert (await s.client.get(f"/api/runs/{run_id}/events")).json() == before
