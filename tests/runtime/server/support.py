"""A live server on a loopback port over a real SQLite store, and a graph that pauses for review."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from prometheus_client import CollectorRegistry

from eventstore import EventStore
from runtime import EdgeSpec, Goal, GraphSpec, NodeSpec, Runtime
from runtime.server import create_app
from runtime.testing import ScriptedProvider, reply, tool_call

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VAGUE = "The draft is vague: name the flight number."

REVIEWED = GraphSpec(
    id="reviewed",
    goal=Goal(description="Publish a checked travel draft", success_criteria=["a flight number"]),
    nodes=[
        NodeSpec(
            id="draft",
            kind="llm",
            description="Draft the trip.",
            output_keys=["draft"],
            success_criteria=["Names a flight number."],
        ),
        NodeSpec(id="review", kind="function", function="review", input_keys=["approved", "note"]),
        NodeSpec(id="publish", kind="function", function="publish", input_keys=["draft"]),
    ],
    edges=[EdgeSpec(source="draft", target="review"), EdgeSpec(source="review", target="publish")],
    entry_node="draft",
    pause_nodes=["review"],
)

QUICK = GraphSpec(
    id="quick",
    nodes=[
        NodeSpec(id="step", kind="function", function="step"),
        NodeSpec(id="gate", kind="function", function="step", input_keys=["ok"]),
    ],
    edges=[EdgeSpec(source="step", target="gate")],
    entry_node="step",
    pause_nodes=["gate"],
)


def review(inputs: dict[str, Any]) -> dict[str, Any]:
    if inputs.get("approved") is not True:
        raise ValueError("not approved")
    return {"reviewed_by": inputs.get("note", "")}


def publish(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"published": f"PUBLISHED: {inputs['draft']}"}


def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"steps": 1}


FUNCTIONS: dict[str, Callable[..., Any]] = {"review": review, "publish": publish, "step": step}


def draft_script(runs: int = 1) -> ScriptedProvider:
    """The model for ``runs`` runs of the draft node: a vague draft RETRIED, then accepted."""
    turns: list[Any] = []
    judge: list[Any] = []
    for _ in range(runs):
        turns += [
            reply("", tool_call("set_output", key="draft", value="fly somewhere")),
            reply("Done."),
            reply("", tool_call("set_output", key="draft", value="TP 1234 LIS-JFK")),
            reply("Done."),
        ]
        judge += [
            f'{{"verdict": "RETRY", "confidence": 0.4, "feedback": "{VAGUE}"}}',
            '{"verdict": "ACCEPT", "confidence": 0.9, "feedback": "Specific."}',
        ]
    return ScriptedProvider(turns, judge=judge)


class Served:
    def __init__(self, url: str, runtime: Runtime, client: httpx.AsyncClient) -> None:
        self.url = url
        self.runtime = runtime
        self.client = client

    async def wait_status(self, run_id: str, *statuses: str) -> dict[str, Any]:
        """Poll the API until the run has one of ``statuses`` (the test's timeout bounds it)."""
        while True:
            response = await self.client.get(f"/api/runs/{run_id}")
            if response.status_code == 200:
                detail: dict[str, Any] = response.json()
                if detail["summary"]["status"] in statuses:
                    return detail
            await asyncio.sleep(0.02)


@asynccontextmanager
async def live_server(app: Any, *, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in this event loop; yield its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@asynccontextmanager
async def served(
    path: Path | EventStore,
    *,
    provider: ScriptedProvider | None = None,
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[Served]:
    """A runtime on a SQLite file at ``path`` (or on a store), its app on a loopback port,
    and a client."""
    async with Runtime(path, provider=provider or draft_script(), functions=FUNCTIONS) as rt:
        app = create_app(rt, graphs=[REVIEWED, QUICK, LOOP, HELD], token=TOKEN, registry=registry)
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield Served(url, rt, client)


def forge_a_verdict(path: Path, run_id: str) -> int:
    """Rewrite a stored judge verdict of ``run_id`` in the SQLite file, as an attacker
    with file access would (a row holding that one event); return its seq."""
    from eventstore import encode_body
    from eventstore._format import store_body
    from runtime.events import Verdict

    conn = sqlite3.connect(path)
    try:
        (seq,) = conn.execute(
            "SELECT e.seq FROM events e JOIN runs r ON r.run = e.run "
            "WHERE r.run_id = ? AND e.type = 'judge.verdict' AND length(e.hash) = 32 "
            "ORDER BY e.seq LIMIT 1",
            (run_id,),
        ).fetchone()
        forged = store_body(
            encode_body(Verdict(node_id="draft", iteration=2, action="accept", level="custom")),
            "judge.verdict",
        )
        conn.execute(
            "UPDATE events SET body = ? WHERE seq = ? AND run = (SELECT run FROM runs "
            "WHERE run_id = ?)",
            (forged, seq, run_id),
        )
        conn.commit()
    finally:
        conn.close()
    return int(seq)


def tick(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"count": inputs.get("count", 0) + 1}


FUNCTIONS["tick"] = tick

LOOP = GraphSpec(
    id="loop",
    nodes=[
        NodeSpec(id="tick", kind="function", function="tick", input_keys=["count"]),
        NodeSpec(id="done", kind="function", function="step"),
    ],
    edges=[
        EdgeSpec(source="tick", target="tick", condition="conditional", expression="count < 400"),
        EdgeSpec(source="tick", target="done", condition="always"),
    ],
    entry_node="tick",
    max_steps=1000,
)


#: Holds the ``hold`` node until a test sets it.
GATE = threading.Event()


async def hold(inputs: dict[str, Any]) -> dict[str, Any]:
    # A sync node would run on the event loop; this one waits in a worker thread.
    await anyio.to_thread.run_sync(GATE.wait, 30)
    return {"held": True}


FUNCTIONS["hold"] = hold

HELD = GraphSpec(
    id="held",
    nodes=[
        NodeSpec(id="hold", kind="function", function="hold"),
        NodeSpec(id="after", kind="function", function="step"),
    ],
    edges=[EdgeSpec(source="hold", target="after")],
    entry_node="hold",
)
