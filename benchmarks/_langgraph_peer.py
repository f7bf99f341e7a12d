"""The LangGraph side of ``python -m benchmarks executor``: a standalone script.

Run with the peer venv's interpreter (``benchmarks/peers/langgraph-venv``); it must not
import magistrate packages (see ``_peer_protocol`` for the command line and the wire).
Workloads mirror ``benchmarks/executor.py`` exactly (same node bodies, same sizes):

- ``info``: versions, and whether ``durability=`` and ``DeltaChannel`` exist.
- ``linear`` (nodes, runs, store, sleep_ms, durability): ``runs`` sequential runs of a
  ``nodes``-node chain; each node adds 1 to ``x``. ``store`` = 1: AsyncSqliteSaver on a
  fresh file with ``durability`` "sync" (each checkpoint written before the next step)
  or "async" (written while the next step runs); 0: no checkpointer. Times the runs only.
- ``concurrent`` (nodes, runs, store, sleep_ms, durability): ``runs`` runs at once, each
  node sleeping ``sleep_ms``; wall time of the whole batch.
- ``loop`` (steps, runs, store): a node looping on itself through a conditional edge
  (``i < steps``) ``steps`` times, ``runs`` runs in sequence, ``durability="sync"``.
- ``memory_list`` (steps, payload_bytes, channel): one run of the loop where each step
  also appends a ``payload_bytes`` string to ``messages``: ``channel`` "binop"
  (``Annotated[list, operator.add]``, the whole list in every checkpoint) or "delta"
  (``DeltaChannel``, beta since langgraph 1.2: checkpoints keep only each step's write and
  a snapshot every 100 updates). Reports the SQLite file size (WAL checkpointed after
  closing; any remaining -wal counted).
"""

from __future__ import annotations

import asyncio
import inspect
import operator
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from importlib import metadata
from typing import Annotated, Any, TypedDict

from _peer_protocol import payload, serve_main
from langgraph.graph import END, START, StateGraph


class Counter(TypedDict):
    x: int


class Loop(TypedDict):
    i: int


class LoopList(TypedDict):
    i: int
    messages: Annotated[list[str], operator.add]


def _supports_durability() -> bool:
    from langgraph.graph.state import CompiledStateGraph

    return "durability" in inspect.signature(CompiledStateGraph.ainvoke).parameters


def _delta_channel() -> Any:
    try:
        from langgraph.channels.delta import DeltaChannel
    except ImportError:
        return None
    return DeltaChannel


DURABILITY = _supports_durability()
DELTA_CHANNEL = _delta_channel()


def _extend(state: list[str], writes: Any) -> list[str]:
    """DeltaChannel's reducer: the list plus every write of the batch, in order."""
    return state + [item for write in writes for item in write]


if DELTA_CHANNEL is not None:

    class LoopDelta(TypedDict):
        i: int
        messages: Annotated[list[str], DELTA_CHANNEL(_extend)]


def _step_node(sleep_ms: float) -> Callable[[Counter], Any]:
    if sleep_ms > 0:
        delay = sleep_ms / 1000

        async def sleeping(state: Counter) -> dict[str, int]:
            await asyncio.sleep(delay)
            return {"x": state["x"] + 1}

        return sleeping

    async def step(state: Counter) -> dict[str, int]:
        return {"x": state["x"] + 1}

    return step


def _linear_graph(nodes: int, sleep_ms: float) -> StateGraph:
    builder = StateGraph(Counter)
    body = _step_node(sleep_ms)
    for i in range(nodes):
        builder.add_node(f"n{i}", body)
    builder.add_edge(START, "n0")
    for i in range(nodes - 1):
        builder.add_edge(f"n{i}", f"n{i + 1}")
    builder.add_edge(f"n{nodes - 1}", END)
    return builder


def _loop_graph(steps: int) -> StateGraph:
    async def loop(state: Loop) -> dict[str, int]:
        return {"i": state["i"] + 1}

    builder = StateGraph(Loop)
    builder.add_node("loop", loop)
    builder.add_edge(START, "loop")
    builder.add_conditional_edges(
        "loop", lambda s: "loop" if s["i"] < steps else END, ["loop", END]
    )
    return builder


def _memory_list_graph(steps: int, size: int, channel: str) -> StateGraph:
    # Annotated Any: a TypedDict annotation would make LangGraph add its channels too.
    async def loop(state: Any) -> dict[str, Any]:
        i = state["i"] + 1
        return {"i": i, "messages": [payload(i, size)]}

    if channel == "delta" and DELTA_CHANNEL is None:
        raise RuntimeError("this langgraph has no DeltaChannel")
    builder = StateGraph(LoopDelta if channel == "delta" else LoopList)
    builder.add_node("loop", loop)
    builder.add_edge(START, "loop")
    builder.add_conditional_edges(
        "loop", lambda s: "loop" if s["i"] < steps else END, ["loop", END]
    )
    return builder


class _Session:
    """A compiled graph on a fresh SQLite file (or none), and how to invoke it."""

    def __init__(
        self, builder: StateGraph, store: bool, recursion_limit: int, durability: str = "sync"
    ) -> None:
        self.builder = builder
        self.store = store
        self.durability = durability
        self.recursion_limit = recursion_limit
        self.dir = tempfile.mkdtemp(prefix="lg-bench-")
        self.path = os.path.join(self.dir, "checkpoints.db")
        self._stack = AsyncExitStack()
        self.graph: Any = None

    async def __aenter__(self) -> _Session:
        saver = None
        if self.store:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            saver = await self._stack.enter_async_context(
                AsyncSqliteSaver.from_conn_string(self.path)
            )
            await saver.setup()
        self.graph = self.builder.compile(checkpointer=saver)
        return self

    async def close(self) -> None:
        await self._stack.aclose()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    async def invoke(self, state: dict[str, Any]) -> dict[str, Any]:
        config: dict[str, Any] = {"recursion_limit": self.recursion_limit}
        kwargs: dict[str, Any] = {}
        if self.store:
            config["configurable"] = {"thread_id": uuid.uuid4().hex}
            if DURABILITY:
                kwargs["durability"] = self.durability
        result: dict[str, Any] = await self.graph.ainvoke(state, config, **kwargs)
        return result


async def _sequential(
    session: _Session, runs: int, state: dict[str, Any], check: Callable[[dict[str, Any]], bool]
) -> float:
    await session.invoke(dict(state))  # warm-up, untimed (as on our side)
    start = time.perf_counter()
    for _ in range(runs):
        out = await session.invoke(dict(state))
        if not check(out):
            raise AssertionError(f"unexpected final state {out!r}")
    return time.perf_counter() - start


async def linear(
    nodes: int = 10, runs: int = 20, store: int = 1, sleep_ms: float = 0, durability: str = "sync"
) -> dict[str, Any]:
    builder = _linear_graph(nodes, sleep_ms)
    async with _Session(builder, bool(store), nodes + 10, durability) as s:
        elapsed = await _sequential(s, runs, {"x": 0}, lambda o: o["x"] == nodes)
    return {"elapsed_s": elapsed, "steps": runs * nodes}


async def concurrent(
    nodes: int = 10, runs: int = 200, store: int = 1, sleep_ms: float = 10, durability: str = "sync"
) -> dict[str, Any]:
    builder = _linear_graph(nodes, sleep_ms)
    async with _Session(builder, bool(store), nodes + 10, durability) as s:
        await s.invoke({"x": 0})
        start = time.perf_counter()
        outs = await asyncio.gather(*(s.invoke({"x": 0}) for _ in range(runs)))
        elapsed = time.perf_counter() - start
    if any(o["x"] != nodes for o in outs):
        raise AssertionError("a concurrent run did not visit every node")
    return {"wall_s": elapsed, "steps": runs * nodes}


async def loop(steps: int = 50, runs: int = 5, store: int = 1) -> dict[str, Any]:
    async with _Session(_loop_graph(steps), bool(store), steps + 10) as s:
        elapsed = await _sequential(s, runs, {"i": 0}, lambda o: o["i"] == steps)
    return {"elapsed_s": elapsed, "steps": runs * steps}


def _file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


async def memory_list(
    steps: int = 50, payload_bytes: int = 2048, channel: str = "binop"
) -> dict[str, Any]:
    session = _Session(_memory_list_graph(steps, payload_bytes, channel), True, steps + 10)
    try:
        await session.__aenter__()
        out = await session.invoke({"i": 0, "messages": []})
        await session.close()
        if len(out["messages"]) != steps:
            raise AssertionError(f"{len(out['messages'])} messages, expected {steps}")
        # Fold the WAL into the main file so the size is what the data takes at rest.
        conn = sqlite3.connect(session.path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        db = _file_size(session.path) + _file_size(session.path + "-wal")
    finally:
        shutil.rmtree(session.dir, ignore_errors=True)
    return {"db_bytes": db, "payload_bytes": steps * payload_bytes}


def info() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "aiosqlite"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "versions": versions,
        "durability_sync": DURABILITY,
        "delta_channel": DELTA_CHANNEL is not None,
        "python": sys.version.split()[0],
    }


WORKLOADS: dict[str, Callable[..., Any]] = {
    "linear": linear,
    "concurrent": concurrent,
    "loop": loop,
    "memory_list": memory_list,
}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    name = request.pop("workload", None)
    if name == "info":
        return info()
    fn = WORKLOADS.get(str(name))
    if fn is None:
        return {"error": f"unknown workload {name!r}"}
    try:
        result: dict[str, Any] = asyncio.run(fn(**request))
    except Exception as exc:  # reported to the benchmark, which prints it
        return {"error": f"{name}: {type(exc).__name__}: {exc}"}
    return result


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:], __doc__, handle))
