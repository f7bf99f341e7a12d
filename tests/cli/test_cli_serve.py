"""``magistrate serve`` in a subprocess: the API over a real store, its token, its shutdown."""

from __future__ import annotations

import signal
import socket
import time

import httpx

from .conftest import Workdir, ok


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(client: httpx.Client, run_id: str, *statuses: str) -> dict:  # type: ignore[type-arg]
    while True:
        response = client.get(f"/api/runs/{run_id}")  # 404 until its first event commits
        if response.status_code == 200 and response.json()["summary"]["status"] in statuses:
            return response.json()  # type: ignore[no-any-return]
        time.sleep(0.05)


def test_serve_runs_approves_and_stops_on_sigint(workdir: Workdir) -> None:
    port = _free_port()
    process = workdir.popen(
        "serve",
        "--store",
        "runs.db",
        "--port",
        str(port),
        "--graph",
        "graph.yaml",
        "--provider",
        "scripted:script.yaml",
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        second = process.stderr.readline()
        assert f"http://127.0.0.1:{port}/#token=" in first
        assert "token (shown once)" in second
        token = second.rsplit(" ", 1)[1].strip()
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            while True:
                try:
                    client.get("/api/runs")
                    break
                except httpx.ConnectError:
                    time.sleep(0.05)
            body = {"graph": "triage", "input": {"text": " refund please "}}
            assert client.post("/api/runs", json=body).status_code == 401
            started = client.post("/api/runs", json=body, headers=auth)
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            paused = _wait_for(client, run_id, "paused", "failed")
            assert paused["summary"]["paused"]["node_id"] == "act"
            approved = client.post(
                f"/api/runs/{run_id}/approve",
                json={"input": {"approved_by": "ana"}, "by": "ana"},
                headers=auth,
            )
            assert approved.status_code == 202
            done = _wait_for(client, run_id, "completed", "failed")
            assert done["memory"]["reply"] == "[billing] approved by ana"
            scraped = client.get("/metrics").text
            assert "magistrate_runs_started_total 1.0" in scraped.splitlines()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    # What the server ran is in the store for every other command.
    shown = ok(workdir.run("runs", "--store", "runs.db", "--output", "json"))
    assert run_id in shown.out


def test_serve_refuses_bad_options(workdir: Workdir) -> None:
    bad_port = workdir.run("serve", "--store", "runs.db", "--port", "70000")
    assert bad_port.code == 2 and "--port" in bad_port.err
    missing = workdir.run("serve", "--store", "runs.db", "--graph", "nope.yaml")
    assert missing.code == 2


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(workdir: Workdir) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = workdir.run("serve", "--store", "runs.db", "--port", str(port))
    assert done.code == 2, done.err
    assert f"magistrate: error: cannot serve on 127.0.0.1:{port}: " in done.err
    assert "address already in use" in done.err
    assert "Traceback" not in done.err
    assert "dashboard at" not in done.err  # nothing announced that does not listen


def test_serve_beyond_loopback_needs_a_token_of_the_user_s(workdir: Workdir) -> None:
    port = _free_port()
    refused = workdir.run("serve", "--store", "runs.db", "--host", "127.0.0.2", "--port", str(port))
    assert refused.code == 2, refused.err
    assert "127.0.0.2 is not loopback" in refused.err and "--token-file" in refused.err
    assert "dashboard at" not in refused.err
    empty = workdir.write("empty.token", "\n")
    bad = workdir.run("serve", "--store", "runs.db", "--token-file", str(empty))
    assert bad.code == 2 and "first line is empty" in bad.err


def test_serve_beyond_loopback_reads_its_token_from_a_file(workdir: Workdir) -> None:
    port = _free_port()
    token_file = workdir.write("api.token", "s3cret-token-from-a-file\n")
    process = workdir.popen(
        "serve", "--store", "runs.db", "--host", "127.0.0.2", "--port", str(port),
        "--token-file", str(token_file),
    )  # fmt: skip
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.strip() == f"magistrate: dashboard at http://127.0.0.2:{port}/"
        with httpx.Client(base_url=f"http://127.0.0.2:{port}", timeout=10) as client:
            assert client.get("/api/runs").status_code == 401
            auth = {"Authorization": "bearer s3cret-token-from-a-file"}
            assert client.get("/api/runs", headers=auth).status_code == 200
            assert client.get("/metrics", headers=auth).status_code == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
