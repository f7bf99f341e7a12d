"""The app mounted in a host's own Starlette app, and ``serve`` on its default loopback bind."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from runtime import Runtime
from runtime.server import create_app, serve

from .support import FUNCTIONS, QUICK, live_server

pytestmark = pytest.mark.anyio


async def test_the_app_works_mounted_under_a_host_path(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        inner = create_app(rt, graphs={"q": QUICK})
        token = inner.state.token
        assert len(token) >= 24

        async def home(request: object) -> PlainTextResponse:
            return PlainTextResponse("host app")

        host = Starlette(routes=[Route("/", home), Mount("/magistrate", inner)])
        async with live_server(host) as url, httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/")).text == "host app"
            auth = {"Authorization": f"Bearer {token}"}
            started = await client.post("/magistrate/api/runs", json={"graph": "q"}, headers=auth)
            assert started.status_code == 201
            listed = (await client.get("/magistrate/api/runs")).json()
            assert [r["run_id"] for r in listed["runs"]] == [started.json()["run_id"]]
            page = await client.get("/magistrate/")
            assert page.status_code == 200
            assert 'data-root="/magistrate"' in page.text
            scripts = re.findall(r'<script src="([^"]+)"', page.text)
            assert "/magistrate/static/app.js" in scripts
            for src in scripts:
                assert (await client.get(src)).status_code == 200, src


async def test_a_browser_revalidates_the_dashboards_files_on_every_load(tmp_path: Path) -> None:
    # The page's scripts share one scope and change together (an upgrade that splits or
    # renames them): a browser that kept an old one by heuristic freshness (the files
    # carry only Last-Modified and an ETag) would run it with the new ones.
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs={"q": QUICK})
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            page = await client.get("/")
            assert page.headers["cache-control"] == "no-cache"
            files = re.findall(r'<(?:script src|link rel="stylesheet" href)="([^"]+)"', page.text)
            assert {"/static/app.js", "/static/run-page.js", "/static/app.css"} <= set(files)
            for src in files:
                first = await client.get(src)
                assert first.status_code == 200, src
                assert first.headers["cache-control"] == "no-cache", src
                # Revalidating costs a 304 while the file is unchanged.
                again = await client.get(src, headers={"If-None-Match": first.headers["etag"]})
                assert again.status_code == 304, src
                assert again.headers["cache-control"] == "no-cache", src


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_serve_binds_to_loopback_and_prints_a_generated_token_once(tmp_path: Path) -> None:
    lines: list[str] = []
    port = _free_port()
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
        task = asyncio.create_task(serve(rt, graphs=[QUICK], port=port, announce=lines.append))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            while True:
                try:
                    response = await client.get("/api/runs")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.02)
            assert response.status_code == 200
            [token] = [line.rsplit(" ", 1)[1] for line in lines if "token (shown once)" in line]
            assert sum(token in line for line in lines) == 2  # the line and the dashboard link
            refused = await client.post("/api/runs", json={"graph": "quick"})
            assert refused.status_code == 401
            accepted = await client.post(
                "/api/runs", json={"graph": "quick"}, headers={"Authorization": f"Bearer {token}"}
            )
            assert accepted.status_code == 201
            rebound = await client.get("/api/runs", headers={"Host": f"evil.example:{port}"})
            assert rebound.status_code == 400
            named = await client.get("/api/runs", headers={"Host": f"localhost:{port}"})
            assert named.status_code == 200
        listening = [conn for conn in _listening(port)]
        assert listening == ["127.0.0.1"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def _listening(port: int) -> list[str]:
    # /proc/net/tcp lists listening sockets (state 0A) with their address in hex.
    found = []
    for table, size in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port and len(address) == size:
                raw = bytes.fromhex(address)
                found.append(socket.inet_ntoa(raw[::-1]) if size == 8 else raw.hex())
    return found


async def test_metrics_shows_the_runtime_s_own_metrics(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families

    from runtime import RuntimeMetrics

    from .support import AUTH, TOKEN, Served

    metrics = RuntimeMetrics(CollectorRegistry())
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, metrics=metrics) as rt:
        app = create_app(rt, graphs=[QUICK], token=TOKEN)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url) as client:
            s = Served(url, rt, client)
            started = await client.post("/api/runs", json={"graph": "quick"}, headers=AUTH)
            run_id = started.json()["run_id"]
            await s.wait_status(run_id, "paused")
            await client.post(
                f"/api/runs/{run_id}/approve", json={"input": {"ok": 1}, "by": "ann"}, headers=AUTH
            )
            await s.wait_status(run_id, "completed")
            text = (await client.get("/metrics")).text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[("magistrate_runs_started_total", ())] == 1
    assert samples[("magistrate_run_pauses_total", (("reason", "hitl"),))] == 1
    finished = [
        value
        for (name, labels), value in samples.items()
        if name == "magistrate_runs_finished_total" and ("status", "completed") in labels
    ]
    assert finished == [1]


async def test_serve_raises_oserror_when_it_cannot_listen(tmp_path: Path) -> None:
    lines: list[str] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS) as rt:
            with pytest.raises(OSError, match=f"cannot serve on 127.0.0.1:{port}: .*in use"):
                await serve(rt, graphs=[QUICK], port=port, announce=lines.append)
    assert lines == []
