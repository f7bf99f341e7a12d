"""Server-sent event streams over real HTTP: a run's events live, and the runs list's changes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from .support import AUTH, served

pytestmark = pytest.mark.anyio


async def _messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    message: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in message:
                yield message
            message = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            message[field] = value


async def test_a_run_stream_sends_the_log_then_live_events_until_it_finishes(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        paused = await s.wait_status(run_id, "paused")
        paused_seq = paused["summary"]["last_seq"]
        seqs: list[int] = []
        async with s.client.stream("GET", f"/api/runs/{run_id}/stream") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for message in _messages(response):
                event = json.loads(message["data"])
                assert message["event"] == "event"
                assert int(message["id"]) == event["seq"]
                seqs.append(event["seq"])
                if event["seq"] == paused_seq:
                    approve = await s.client.post(
                        f"/api/runs/{run_id}/approve",
                        json={"input": {"ok": 1}, "by": "ann"},
                        headers=AUTH,
                    )
                    assert approve.status_code == 202
                if event["type"] == "run.finished":
                    assert event["body"]["status"] == "completed"
                    break
        assert seqs == list(range(1, seqs[-1] + 1))
        assert seqs[-1] > paused_seq

        # A client that reconnects with Last-Event-ID gets only what it missed.
        headers = {"Last-Event-ID": str(paused_seq)}
        async with s.client.stream("GET", f"/api/runs/{run_id}/stream", headers=headers) as again:
            async for message in _messages(again):
                assert json.loads(message["data"])["seq"] == paused_seq + 1
                break
        missing = await s.client.get("/api/runs/nope/stream")
        assert missing.status_code == 404


async def test_the_runs_stream_tells_of_every_change(tmp_path: Path) -> None:
    async with served(tmp_path / "runs.db") as s:
        first = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        await s.wait_status(first.json()["run_id"], "paused")
        async with s.client.stream("GET", "/api/stream") as response:
            started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            run_id = started.json()["run_id"]
            types: list[str] = []
            async for message in _messages(response):
                assert message["event"] == "run"
                change = json.loads(message["data"])
                if change["run_id"] != run_id:
                    continue
                types.append(change["type"])
                if change["type"] == "run.paused":
                    break
        assert types[0] == "run.started"
        assert "node.completed" in types


async def test_a_new_runs_stream_client_starts_at_the_stores_newest_change(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "runs.db") as s:
        # An older run that changes after more than a page of newer runs last changed.
        older = (await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)).json()
        await s.wait_status(older["run_id"], "paused")
        for _ in range(25):
            newer = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            await s.wait_status(newer.json()["run_id"], "paused")
        approve = await s.client.post(
            f"/api/runs/{older['run_id']}/approve",
            json={"input": {"ok": 1}, "by": "ann"},
            headers=AUTH,
        )
        assert approve.status_code == 202
        await s.wait_status(older["run_id"], "completed")
        async with s.client.stream("GET", "/api/stream") as response:
            marker = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            async for message in _messages(response):
                first = json.loads(message["data"])
                break
    assert first["run_id"] == marker.json()["run_id"]
    assert first["type"] == "run.started"


async def test_a_stream_from_past_the_runs_end_follows_from_the_stores_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``?after=`` past the run's last seq: nothing to send yet, and the stream follows the
    store from its head, not from its first event (every run's log read and decoded for
    each such connection); the run's next event still arrives."""
    async with served(tmp_path / "runs.db") as s:
        for _ in range(3):  # other runs' events the stream has no business reading
            other = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            await s.wait_status(other.json()["run_id"], "paused")
        started = await s.client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        run_id = started.json()["run_id"]
        paused = (await s.wait_status(run_id, "paused"))["summary"]["last_seq"]
        store = s.runtime.store
        assert store is not None
        head = await store.head_position()
        followed: list[int] = []
        following = anyio.Event()
        tail = type(store).tail

        def watched(self: Any, *, from_position: int = 0, **kwargs: Any) -> Any:
            followed.append(from_position)
            following.set()
            return tail(self, from_position=from_position, **kwargs)

        monkeypatch.setattr(type(store), "tail", watched)
        path = f"/api/runs/{run_id}/stream"
        async with s.client.stream("GET", path, params={"after": paused + 5}) as response:
            assert response.status_code == 200
            with anyio.fail_after(10):
                await following.wait()
        assert followed == [head]
