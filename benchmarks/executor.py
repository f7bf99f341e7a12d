"""``python -m benchmarks executor [--quick]``: the executor against LangGraph, side by side.

Five workloads, each run by us (in this process) and by LangGraph (in its own venv, see
``_peers`` and ``_langgraph_peer.py``) with the same node bodies, sizes and durability:

(a) ``linear_sync``: a 10-node chain of plain async nodes (each adds 1 to ``x``), runs in
    sequence, durable log: ours a SQLite file (WAL, synchronous=FULL, ``durability=
    "sync"``), LangGraph AsyncSqliteSaver on a file with ``durability="sync"``.
(b) ``linear_nostore``: the same with no store (ours ``Runtime(None)``, LangGraph no
    checkpointer).
(c) ``concurrent``: 200 runs at once of the 10-node chain whose nodes each sleep 10 ms,
    durable as in (a); wall time against the 100 ms ideal.
(d) ``self_loop``: one node looping on itself through a conditional edge (``i < 50``),
    50 steps per run, durable as in (a).
(e) ``memory_list``: the self-loop where each step also appends a 2 KB string to a list
    in memory (ours an ``append`` memory key, LangGraph ``Annotated[list, operator.add]``);
    the database size at rest (WAL checkpointed after closing) over 50 x 2048 bytes.

(a), (b) and (d) report node executions per second over sequential runs, measured in
alternating rounds (ours, theirs, ours, theirs, ...) with medians reported; each side does
one untimed warm-up run first. Ratios are "how many times better ours is": throughput
ours / theirs, wall time and bytes theirs / ours.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchmarks._common import figure, format_number, print_table
from benchmarks._peers import PeerError, PeerProcess, ensure_langgraph
from runtime._runtime import Runtime
from runtime._spec import EdgeSpec, GraphSpec, MemoryKey, NodeSpec

__all__ = ["main"]

PEER_SCRIPT = Path(__file__).resolve().parent / "_langgraph_peer.py"
UNAVAILABLE = "peer unavailable"
#: Each node of the concurrent workload sleeps this long (the ideal run is nodes x this).
SLEEP_MS = 10.0
#: Bytes appended to the memory list per step in the memory-list workload.
PAYLOAD_BYTES = 2048


@dataclass(frozen=True)
class Sizes:
    """How much work each workload does; the node counts and payloads are the issue's."""

    rounds: int
    linear_runs: int
    nostore_runs: int
    loop_runs: int
    concurrent_rounds: int
    nodes: int = 10
    concurrent_runs: int = 200
    loop_steps: int = 50


QUICK = Sizes(rounds=3, linear_runs=20, nostore_runs=50, loop_runs=4, concurrent_rounds=1)
FULL = Sizes(rounds=5, linear_runs=100, nostore_runs=400, loop_runs=20, concurrent_rounds=3)


def payload(step: int, size: int) -> str:
    """The ``size``-byte ASCII message of step ``step``, identical in _langgraph_peer.py.

    Base64 of a SHA-256 chain: text-like and deterministic, but not trivially compressible,
    so a store that compresses cannot make the size figure meaningless.
    """
    chunks: list[str] = []
    length = 0
    block = 0
    while length < size:
        digest = hashlib.sha256(f"{step}:{block}".encode()).digest()
        chunks.append(base64.b64encode(digest).decode("ascii"))
        length += len(chunks[-1])
        block += 1
    return "".join(chunks)[:size]


# ---------------------------------------------------------------------------- graphs


async def step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"x": inputs["x"] + 1}


async def sleeping_step(inputs: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(SLEEP_MS / 1000)
    return {"x": inputs["x"] + 1}


async def loop_step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"i": inputs["i"] + 1}


async def list_step(inputs: dict[str, Any]) -> dict[str, Any]:
    i = inputs["i"] + 1
    return {"i": i, "messages": payload(i, PAYLOAD_BYTES)}


FUNCTIONS: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "step": step,
    "sleeping_step": sleeping_step,
    "loop_step": loop_step,
    "list_step": list_step,
}


def linear_graph(nodes: int, function: str) -> GraphSpec:
    return GraphSpec(
        id=f"linear-{nodes}",
        nodes=[NodeSpec(id=f"n{i}", function=function) for i in range(nodes)],
        edges=[EdgeSpec(source=f"n{i}", target=f"n{i + 1}") for i in range(nodes - 1)],
        entry_node="n0",
        max_steps=nodes + 10,
        durability="sync",
    )


def loop_graph(steps: int, function: str, memory: list[MemoryKey] | None = None) -> GraphSpec:
    return GraphSpec(
        id=f"loop-{steps}",
        nodes=[NodeSpec(id="loop", function=function)],
        edges=[
            EdgeSpec(
                source="loop", target="loop", condition="conditional", expression=f"i < {steps}"
            ),
        ],
        entry_node="loop",
        max_steps=steps + 10,
        memory=memory or [],
        durability="sync",
    )


# ---------------------------------------------------------------------------- our side


@contextmanager
def _temp_db(store: bool) -> Iterator[str | None]:
    directory = tempfile.mkdtemp(prefix="magistrate-bench-")
    try:
        yield os.path.join(directory, "events.db") if store else None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _check(result: Any, key: str, expected: int) -> None:
    if result.status != "completed" or result.memory.get(key) != expected:
        raise AssertionError(
            f"run ended {result.status} with {key}={result.memory.get(key)!r} "
            f"(expected {expected}); error: {getattr(result, 'error', None)}"
        )


async def _sequential(
    graph: GraphSpec, store: bool, runs: int, state: dict[str, Any], key: str, expected: int
) -> float:
    with _temp_db(store) as path:
        async with Runtime(path, functions=FUNCTIONS) as rt:
            _check(await (await rt.start(graph, input=state)).result(), key, expected)
            start = time.perf_counter()
            for _ in range(runs):
                handle = await rt.start(graph, input=state)
                _check(await handle.result(), key, expected)
            return time.perf_counter() - start


async def ours_linear(nodes: int, runs: int, store: bool) -> dict[str, Any]:
    graph = linear_graph(nodes, "step")
    elapsed = await _sequential(graph, store, runs, {"x": 0}, "x", nodes)
    return {"elapsed_s": elapsed, "steps": runs * nodes}


async def ours_loop(steps: int, runs: int) -> dict[str, Any]:
    graph = loop_graph(steps, "loop_step")
    elapsed = await _sequential(graph, True, runs, {"i": 0}, "i", steps)
    return {"elapsed_s": elapsed, "steps": runs * steps}


async def ours_concurrent(nodes: int, runs: int) -> dict[str, Any]:
    graph = linear_graph(nodes, "sleeping_step")
    with _temp_db(True) as path:
        async with Runtime(path, functions=FUNCTIONS) as rt:
            _check(await (await rt.start(graph, input={"x": 0})).result(), "x", nodes)
            results: list[Any] = []

            async def one() -> None:
                # start returns once the run's start is committed: the runs start at once,
                # as LangGraph's invocations are gathered, so their first commits group.
                handle = await rt.start(graph, input={"x": 0})
                results.append(await handle.result())

            start = time.perf_counter()
            async with anyio.create_task_group() as tasks:
                for _ in range(runs):
                    tasks.start_soon(one)
            elapsed = time.perf_counter() - start
    for result in results:
        _check(result, "x", nodes)
    return {"wall_s": elapsed, "steps": runs * nodes}


def _file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


async def ours_memory_list(steps: int, payload_bytes: int) -> dict[str, Any]:
    graph = loop_graph(steps, "list_step", [MemoryKey(name="messages", reducer="append")])
    with _temp_db(True) as path:
        assert path is not None
        async with Runtime(path, functions=FUNCTIONS) as rt:
            result = await (await rt.start(graph, input={"i": 0})).result()
        _check(result, "i", steps)
        if len(result.memory.get("messages", [])) != steps:
            raise AssertionError(f"{len(result.memory.get('messages', []))} messages")
        # Fold the WAL into the main file so the size is what the data takes at rest.
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        size = _file_size(path) + _file_size(path + "-wal")
    return {"db_bytes": size, "payload_bytes": steps * payload_bytes}


def run_ours(fn: Callable[..., Awaitable[dict[str, Any]]], **kwargs: Any) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        return await fn(**kwargs)

    return anyio.run(call, backend="asyncio")


# ---------------------------------------------------------------------------- the table


@dataclass
class Row:
    """One workload's figures: ours, theirs (None: peer unavailable) and the verdict."""

    name: str
    label: str
    unit: str
    ours: float
    theirs: float | None
    higher_is_better: bool
    target: str = "-"
    passed: bool | None = None
    note: str = ""
    extra: dict[str, tuple[float, str]] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.theirs is None or self.ours == 0 or self.theirs == 0:
            return None
        return self.ours / self.theirs if self.higher_is_better else self.theirs / self.ours


def _cell(value: float | None, unit: str) -> str:
    return UNAVAILABLE if value is None else f"{format_number(value)} {unit}"


def print_rows(rows: list[Row], title: str) -> None:
    table = []
    for row in rows:
        result = "-" if row.passed is None else ("pass" if row.passed else "FAIL")
        if row.theirs is None:
            theirs, ratio = row.note or UNAVAILABLE, UNAVAILABLE
        else:
            theirs = _cell(row.theirs, row.unit)
            ratio = "-" if row.ratio is None else f"{format_number(row.ratio)} x"
        table.append((row.label, _cell(row.ours, row.unit), theirs, ratio, row.target, result))
    print_table(title, ("workload", "ours", "langgraph", "ratio", "target", "result"), table)
    print()


def print_figures(rows: list[Row]) -> None:
    for row in rows:
        figure(f"executor.{row.name}", row.ours, row.unit)
        for key, (value, unit) in row.extra.items():
            figure(f"executor.{key}", value, unit)
        if row.theirs is not None:
            figure(f"executor.langgraph.{row.name}", row.theirs, row.unit)
            if row.ratio is not None:
                figure(f"executor.vs_langgraph.{row.name.split('.')[0]}", row.ratio, "x")


# ---------------------------------------------------------------------------- driver


class _Peer:
    """The LangGraph process, or the reason it is unavailable."""

    def __init__(self, enabled: bool) -> None:
        self.process: PeerProcess | None = None
        self.reason = UNAVAILABLE
        if not enabled:
            self.reason = "peer skipped"
            return
        python = ensure_langgraph()
        if python is None:
            return
        self.process = PeerProcess("langgraph", python, PEER_SCRIPT)
        try:
            info = self.process.request("info")
        except PeerError as exc:
            print(f"[peers] {exc}")
            self.close()
            return
        versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        mode = (
            'durability="sync"'
            if info["durability_sync"]
            else "the checkpointer's default durability (no durability= argument)"
        )
        print(f"LangGraph peer: {versions}; AsyncSqliteSaver on a file, {mode}")

    def request(self, workload: str, **params: Any) -> dict[str, Any] | None:
        if self.process is None:
            return None
        try:
            return self.process.request(workload, **params)
        except PeerError as exc:
            print(f"[peers] {workload}: {exc}")
            return None

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rate(result: dict[str, Any]) -> float:
    return float(result["steps"]) / float(result["elapsed_s"])


def _alternate(
    rounds: int,
    ours: Callable[[], dict[str, Any]],
    theirs: Callable[[], dict[str, Any] | None],
    figure: Callable[[dict[str, Any]], float],
) -> tuple[float, float | None]:
    our_values: list[float] = []
    their_values: list[float] = []
    for _ in range(rounds):
        our_values.append(figure(ours()))
        reply = theirs()
        if reply is not None:
            their_values.append(figure(reply))
    median = _median(our_values)
    assert median is not None
    # A peer that failed in some rounds is reported only if it answered in all of them.
    return median, (_median(their_values) if len(their_values) == rounds else None)


def run(sizes: Sizes, peer: _Peer) -> list[Row]:
    rows: list[Row] = []
    n = sizes.nodes

    ours, theirs = _alternate(
        sizes.rounds,
        lambda: run_ours(ours_linear, nodes=n, runs=sizes.linear_runs, store=True),
        lambda: peer.request("linear", nodes=n, runs=sizes.linear_runs, store=1),
        _rate,
    )
    row = Row(
        "linear_sync.steps_per_s",
        "(a) linear, durable",
        "steps/s",
        ours,
        theirs,
        True,
        target=">= 3x langgraph",
    )
    row.passed = None if row.ratio is None else row.ratio >= 3
    rows.append(row)

    ours, theirs = _alternate(
        sizes.rounds,
        lambda: run_ours(ours_linear, nodes=n, runs=sizes.nostore_runs, store=False),
        lambda: peer.request("linear", nodes=n, runs=sizes.nostore_runs, store=0),
        _rate,
    )
    rows.append(
        Row("linear_nostore.steps_per_s", "(b) linear, no store", "steps/s", ours, theirs, True)
    )

    ideal_ms = n * SLEEP_MS
    ours, theirs = _alternate(
        sizes.concurrent_rounds,
        lambda: run_ours(ours_concurrent, nodes=n, runs=sizes.concurrent_runs),
        lambda: peer.request(
            "concurrent", nodes=n, runs=sizes.concurrent_runs, store=1, sleep_ms=SLEEP_MS
        ),
        lambda r: float(r["wall_s"]) * 1000,
    )
    row = Row(
        "concurrent.wall_ms",
        f"(c) {sizes.concurrent_runs} concurrent, durable, wall",
        "ms",
        ours,
        theirs,
        False,
        target=f"<= 2x ideal ({ideal_ms:.0f} ms), >= 15x",
    )
    vs_ideal = ours / ideal_ms
    row.extra["concurrent.vs_ideal"] = (vs_ideal, "x")
    row.passed = vs_ideal <= 2 and (row.ratio is None or row.ratio >= 15)
    rows.append(row)

    ours, theirs = _alternate(
        sizes.rounds,
        lambda: run_ours(ours_loop, steps=sizes.loop_steps, runs=sizes.loop_runs),
        lambda: peer.request("loop", steps=sizes.loop_steps, runs=sizes.loop_runs, store=1),
        _rate,
    )
    rows.append(
        Row(
            "self_loop.steps_per_s",
            f"(d) {sizes.loop_steps}-step self-loop, durable",
            "steps/s",
            ours,
            theirs,
            True,
        )
    )

    def over_payload(r: dict[str, Any]) -> float:
        return float(r["db_bytes"]) / float(r["payload_bytes"])

    ours, theirs = _alternate(
        1,
        lambda: run_ours(ours_memory_list, steps=sizes.loop_steps, payload_bytes=PAYLOAD_BYTES),
        lambda: peer.request("memory_list", steps=sizes.loop_steps, payload_bytes=PAYLOAD_BYTES),
        over_payload,
    )
    row = Row(
        "memory_list.db_over_payload",
        "(e) memory list, db / payload",
        "x",
        ours,
        theirs,
        False,
        target="<= 1.5x payload",
    )
    row.extra["memory_list.db_bytes"] = (ours * sizes.loop_steps * PAYLOAD_BYTES, "bytes")
    row.passed = ours <= 1.5
    rows.append(row)
    return rows


def main(quick: bool, *, peer: bool = True) -> None:
    """Run the executor benchmark and print the table, then one line per figure.

    ``peer=False`` (or MAGISTRATE_BENCH_NO_PEER=1) skips LangGraph entirely.
    """
    sizes = QUICK if quick else FULL
    enabled = peer and os.environ.get("MAGISTRATE_BENCH_NO_PEER", "") in ("", "0")
    print(
        f"executor benchmark ({'quick' if quick else 'full'}): "
        f"{sizes.rounds} alternating rounds, medians; {sizes.linear_runs} durable / "
        f"{sizes.nostore_runs} in-memory linear runs, {sizes.loop_runs} loop runs, "
        f"{sizes.concurrent_rounds} concurrent round(s)"
    )
    the_peer = _Peer(enabled)
    started = time.perf_counter()
    try:
        rows = run(sizes, the_peer)
    finally:
        the_peer.close()
    took = time.perf_counter() - started
    print_rows(rows, f"executor vs LangGraph (ratio: times better, ours over theirs; {took:.0f} s)")
    print_figures(rows)


if __name__ == "__main__":  # until the ``python -m benchmarks`` dispatcher exists
    main("--quick" in sys.argv[1:], peer="--no-peer" not in sys.argv[1:])
