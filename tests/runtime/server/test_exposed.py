"""A server beyond loopback: a token of the user's for every request, reads included, a Host
check, security headers on every answer, and 4xx (never 5xx) for malformed or refused input."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from runtime import Runtime
from runtime.server import create_app, serve

from .support import AUTH, FUNCTIONS, QUICK, TOKEN, Served, live_server

pytestmark = pytest.mark.anyio

EXPOSED = "127.0.0.2"  # not loopback by the server's rule, yet reachable here


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def _serving(
    rt: Runtime, host: str, **options: object
) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    port = _free_port(host)
    lines: list[str] = []
    task = asyncio.create_task(
        serve(rt, graphs=[QUICK], host=host, port=port, announce=lines.append, **options)  # type: ignore[arg-type]
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=20) as client:
            while not lines:
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
            yield client, port
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_serving_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        with pytest.raises(ValueError, match=r"127\.0\.0\.2 is not loopback"):
            await serve(rt, graphs=[QUICK], host=EXPOSED, port=_free_port(EXPOSED))


async def test_beyond_loopback_every_read_needs_the_token_and_the_host_is_checked(
    tmp_path: Path,
) -> None:
    async with (
        Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt,
        _serving(rt, EXPOSED, token=TOKEN, allowed_hosts=["magistrate.example"]) as (client, port),
    ):
        started = await client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
        assert started.status_code == 201
        run_id = started.json()["run_id"]
        reads = [
            "/api/runs",
            f"/api/runs/{run_id}",
            f"/api/runs/{run_id}/events",
            f"/api/runs/{run_id}/state",
            f"/api/runs/{run_id}/verify",
            "/api/graphs",
            "/metrics",
            "/openapi.json",
        ]
        for path in reads:
            refused = await client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"] == "Bearer"
            assert run_id not in refused.text
            # The scheme's case is free (RFC 9110); the token is not.
            wrong = await client.get(path, headers={"Authorization": "Bearer not-it"})
            assert wrong.status_code == 401, path
            answered = await client.get(path, headers={"Authorization": f"bEARER {TOKEN}"})
            assert answered.status_code == 200, path
        for stream in ("/api/stream", f"/api/runs/{run_id}/stream"):
            async with client.stream("GET", stream) as response:
                assert response.status_code == 401, stream
        # The dashboard's shell holds no run data: a browser loads it, then asks the token.
        for page in ("/", "/approvals", f"/runs/{run_id}", "/static/app.js"):
            assert (await client.get(page)).status_code == 200, page
        # Host: the bind address or an allowed name; a rebound DNS name is refused.
        for host, status in (
            (f"evil.example:{port}", 400),
            (f"localhost:{port}", 400),
            (f"magistrate.example:{port}", 200),
            (f"{EXPOSED}:{port}", 200),
        ):
            answered = await client.get("/api/runs", headers={**AUTH, "Host": host})
            assert answered.status_code == status, host


async def test_on_loopback_reads_may_need_the_token_and_a_host_may_be_added(
    tmp_path: Path,
) -> None:
    async with (
        Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt,
        _serving(rt, "127.0.0.1", token=TOKEN, read_token=True, allowed_hosts=["box.lan"]) as (
            client,
            port,
        ),
    ):
        assert (await client.get("/api/runs")).status_code == 401
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/api/runs", headers=AUTH)).status_code == 200
        named = await client.get("/api/runs", headers={**AUTH, "Host": f"box.lan:{port}"})
        assert named.status_code == 200
        other = await client.get("/api/runs", headers={**AUTH, "Host": f"evil.example:{port}"})
        assert other.status_code == 400


async def test_create_app_takes_the_same_options(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[QUICK], token=TOKEN, read_token=True, allowed_hosts=["a.b"])
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/api/runs", headers={"Host": "a.b"})).status_code == 401
            ok = await client.get("/api/runs", headers={**AUTH, "Host": "a.b"})
            assert ok.status_code == 200
            assert (await client.get("/api/runs", headers=AUTH)).status_code == 400


async def test_every_answer_carries_security_headers(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[QUICK], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            answers = [
                await client.get("/"),
                await client.get("/static/app.js"),
                await client.get("/api/runs"),
                await client.get("/api/runs/nope"),
                await client.post("/api/runs", json={"graph": "quick"}),
            ]
            for answer in answers:
                csp = answer.headers["content-security-policy"]
                assert "script-src 'self'" in csp and "style-src 'self'" in csp
                assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
                assert answer.headers["x-frame-options"] == "DENY"
                assert answer.headers["x-content-type-options"] == "nosniff"


async def test_malformed_input_is_a_400_and_refused_input_a_4xx(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[QUICK], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=20) as client:
            s = Served(url, rt, client)
            started = await client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            run_id = started.json()["run_id"]
            await s.wait_status(run_id, "paused")
            json_headers = {**AUTH, "Content-Type": "application/json"}
            deep = b'{"graph": "quick", "input": {"a": ' + b"[" * 1000 + b"]" * 1000 + b"}}"
            bad_utf8 = b'{"graph": "quick", "input": {"a": "\xff\xfe"}}'
            for content in (deep, bad_utf8):
                answer = await client.post("/api/runs", content=content, headers=json_headers)
                assert answer.status_code == 400, answer.text
                assert answer.json()["error"] == "invalid_json"
            for last in ("²".encode("latin-1"), b"9" * 400, b"-1"):
                async with client.stream(
                    "GET", f"/api/runs/{run_id}/stream", headers={"Last-Event-ID": last}
                ) as response:
                    await response.aread()
                    assert response.status_code == 400, last
            # Input the log cannot store as given (nested past its depth) is refused: 422.
            nested: object = 1
            for _ in range(101):
                nested = [nested]
            answer = await client.post(
                f"/api/runs/{run_id}/approve", json={"input": {"ok": nested}}, headers=AUTH
            )
            assert answer.status_code == 422, answer.text
            assert (await s.wait_status(run_id, "paused"))["summary"]["status"] == "paused"
            wrong_method = await client.post("/api/graphs", json={}, headers=AUTH)
            assert wrong_method.status_code == 405
            assert wrong_method.headers["allow"] == "GET, HEAD"
