"""``python -m benchmarks executor [--quick]``: the executor against LangGraph and DBOS.

Five workloads, each run by us (in this process, ``_executor_ours``) and by the peers (each
in its own venv, see ``_peers``; the peer sides are ``_langgraph_peer.py`` and
``_dbos_executor_peer.py``) with the same step bodies and sizes:

(a) ``linear_sync``: a 10-node chain of plain async nodes (each adds 1 to ``x``), runs in
    sequence, durable: ours a SQLite file (WAL, synchronous=FULL, ``durability="sync"``);
    LangGraph AsyncSqliteSaver on a file with ``durability="sync"`` and, its faster
    setting, ``"async"``; DBOS Transact an async workflow of 10 ``@DBOS.step`` steps, its
    system database a SQLite file in WAL mode (synchronous=FULL, SQLite's default).
(b) ``linear_nostore``: the same with no store (ours ``Runtime(None)``, LangGraph no
    checkpointer; DBOS has no mode without its database).
(c) ``concurrent``: 200 runs at once of the 10-node chain whose nodes each sleep 10 ms,
    durable as in (a) (DBOS: 200 ``DBOS.start_workflow_async``); wall time against the
    100 ms ideal.
(d) ``self_loop``: one node looping on itself through a conditional edge (``i < 50``),
    50 steps per run, durable as in (a) (LangGraph only: DBOS has no graph).
(e) ``memory_list``: the self-loop where each step also appends a 2 KB string to a list
    in memory (ours an ``append`` memory key; LangGraph ``Annotated[list, operator.add]``
    and ``DeltaChannel``, which stores each step's write instead of the whole list; DBOS
    a workflow of 50 steps each returning the 2 KB string, the step outputs DBOS
    checkpoints); the database size at rest (WAL checkpointed after closing) over
    50 x 2048 bytes.

Throughputs and wall times are medians of alternating rounds (ours, then each peer
setting, then ours again ...); each side does one untimed warm-up run first. Ratios are
"how many times better ours is" (> 1: ours is better): throughput ours / theirs, wall time
and bytes theirs / ours. Prints ``executor.vs_langgraph.X``, ``executor.vs_langgraph_async.X``
and ``executor.vs_dbos.X`` (X the workload's letter), ``executor.vs_langgraph.storage_best``
(LangGraph's smallest database over ours) and the targets, met or not.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks._executor_ours import (
    PAYLOAD_BYTES,
    SLEEP_MS,
    ours_concurrent,
    ours_linear,
    ours_loop,
    ours_memory_list,
    run_ours,
)
from benchmarks._executor_report import FLOOR, Workload, print_figures, print_report
from benchmarks._floor_compare import FloorSizes, floor_round, print_floor
from benchmarks._peers import PeerSession, ensure_dbos, ensure_langgraph

__all__ = ["main"]

HERE = Path(__file__).resolve().parent
LANGGRAPH_SCRIPT = HERE / "_langgraph_peer.py"
DBOS_SCRIPT = HERE / "_dbos_executor_peer.py"


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
#: Ours against the floor (``_floor``): at least 7 alternating rounds, also when quick.
FLOOR_QUICK = FloorSizes(rounds=7, linear_runs=20, spec_runs=30)
FLOOR_FULL = FloorSizes(rounds=9, linear_runs=50, spec_runs=100)

#: A peer setting: figure prefix and table label.
LANGGRAPH = ("langgraph", "LangGraph, durability sync")
LANGGRAPH_ASYNC = ("langgraph_async", "LangGraph, durability async")
LANGGRAPH_PLAIN = ("langgraph", "LangGraph, no checkpointer")
LANGGRAPH_ADD = ("langgraph", "LangGraph, operator.add list")
LANGGRAPH_DELTA = ("langgraph_delta", "LangGraph, DeltaChannel list")
DBOS = ("dbos", "DBOS Transact")
DBOS_OUTPUTS = ("dbos", "DBOS Transact, step outputs")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _rate(result: dict[str, Any]) -> float:
    return float(result["steps"]) / float(result["elapsed_s"])


def _wall_ms(result: dict[str, Any]) -> float:
    return float(result["wall_s"]) * 1000


def _over_payload(result: dict[str, Any]) -> float:
    return float(result["db_bytes"]) / float(result["payload_bytes"])


class Setting(Protocol):
    """What measure() asks of a peer session: whether it runs, and why not."""

    @property
    def available(self) -> bool: ...

    reason: str


class InProcess:
    """The floor program's setting: always available, run in this process."""

    available = True
    reason = ""


#: A peer setting to measure: (figure prefix, label), its session, the request.
PeerCall = tuple[tuple[str, str], Setting, Callable[[], dict[str, Any] | None]]


def floor_call(nodes: int, runs: int, concurrent: bool) -> PeerCall:
    """The floor program's rounds of (a) (``runs`` in sequence) or (c) (``runs`` at once,
    nodes sleeping 10 ms), durable, answered as the peers answer."""

    def call() -> dict[str, Any]:
        measured = asyncio.run(floor_round(nodes, runs, concurrent, True))
        return {"wall_s": measured.wall_s, "elapsed_s": measured.wall_s, "steps": measured.steps}

    return (FLOOR, InProcess(), call)


def measure(
    workload: Workload,
    rounds: int,
    ours: Callable[[], dict[str, Any]],
    peers: list[PeerCall],
    value: Callable[[dict[str, Any]], float],
) -> dict[str, dict[str, Any]]:
    """Fill ``workload`` with medians over ``rounds`` alternating rounds; return each peer
    setting's last reply. A setting that failed in any round is reported as not measured."""
    started = time.perf_counter()
    our_values: list[float] = []
    their_values: dict[str, list[float]] = {key: [] for (key, _), _, _ in peers}
    last: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        our_values.append(value(ours()))
        for (key, _), session, call in peers:
            reply = call() if session.available else None
            if reply is not None:
                their_values[key].append(value(reply))
                last[key] = reply
    median = _median(our_values)
    assert median is not None
    workload.ours = median
    for (key, label), session, _ in peers:
        got = their_values[key]
        if len(got) == rounds:
            workload.theirs[key] = (label, _median(got), "")
        else:
            why = "failed (see [peers] above)" if session.available else session.reason
            workload.theirs[key] = (label, None, why)
    print(f"  {workload.label}: measured in {time.perf_counter() - started:.1f} s", flush=True)
    return last


def run(sizes: Sizes, langgraph: PeerSession, dbos: PeerSession) -> list[Workload]:
    n = sizes.nodes
    lg_async = langgraph.available and bool(langgraph.info.get("durability_sync"))
    delta = langgraph.available and bool(langgraph.info.get("delta_channel"))
    workloads: list[Workload] = []

    def linear_peers(runs: int) -> list[PeerCall]:
        calls: list[PeerCall] = [
            (LANGGRAPH, langgraph, lambda: langgraph.request("linear", nodes=n, runs=runs)),
        ]
        if lg_async or not langgraph.available:
            calls.append(
                (
                    LANGGRAPH_ASYNC,
                    langgraph,
                    lambda: langgraph.request("linear", nodes=n, runs=runs, durability="async"),
                )
            )
        calls.append((DBOS, dbos, lambda: dbos.request("linear", steps=n, runs=runs)))
        calls.append(floor_call(n, runs, concurrent=False))
        return calls

    a = Workload("a", "linear_sync.steps_per_s", "(a) 10-node linear, durable", "steps/s", True, 0)
    measure(
        a,
        sizes.rounds,
        lambda: run_ours(ours_linear, nodes=n, runs=sizes.linear_runs, store=True),
        linear_peers(sizes.linear_runs),
        _rate,
    )
    workloads.append(a)

    b = Workload("b", "linear_nostore.steps_per_s", "(b) the same, no store", "steps/s", True, 0)
    runs_b = sizes.nostore_runs
    measure(
        b,
        sizes.rounds,
        lambda: run_ours(ours_linear, nodes=n, runs=runs_b, store=False),
        [
            (
                LANGGRAPH_PLAIN,
                langgraph,
                lambda: langgraph.request("linear", nodes=n, runs=runs_b, store=0),
            )
        ],
        _rate,
    )
    workloads.append(b)

    runs_c = sizes.concurrent_runs

    def concurrent(durability: str) -> dict[str, Any] | None:
        return langgraph.request(
            "concurrent", nodes=n, runs=runs_c, sleep_ms=SLEEP_MS, durability=durability
        )

    c_peers: list[PeerCall] = [(LANGGRAPH, langgraph, lambda: concurrent("sync"))]
    if lg_async or not langgraph.available:
        c_peers.append((LANGGRAPH_ASYNC, langgraph, lambda: concurrent("async")))
    c_peers.append(
        (
            DBOS,
            dbos,
            lambda: dbos.request("concurrent", steps=n, runs=runs_c, sleep_ms=SLEEP_MS),
        )
    )
    c_peers.append(floor_call(n, runs_c, concurrent=True))
    c = Workload("c", "concurrent.wall_ms", f"(c) {runs_c} concurrent, 10 x 10 ms", "ms", False, 0)
    measure(
        c,
        sizes.concurrent_rounds,
        lambda: run_ours(ours_concurrent, nodes=n, runs=runs_c),
        c_peers,
        _wall_ms,
    )
    c.extra["concurrent.vs_ideal"] = (c.ours / (n * SLEEP_MS), "x")
    workloads.append(c)

    steps, runs_d = sizes.loop_steps, sizes.loop_runs
    d = Workload(
        "d", "self_loop.steps_per_s", f"(d) {steps}-step self-loop, durable", "steps/s", True, 0
    )
    measure(
        d,
        sizes.rounds,
        lambda: run_ours(ours_loop, steps=steps, runs=runs_d),
        [(LANGGRAPH, langgraph, lambda: langgraph.request("loop", steps=steps, runs=runs_d))],
        _rate,
    )
    workloads.append(d)

    def memory_list(channel: str) -> dict[str, Any] | None:
        return langgraph.request(
            "memory_list", steps=steps, payload_bytes=PAYLOAD_BYTES, channel=channel
        )

    e_peers: list[PeerCall] = [(LANGGRAPH_ADD, langgraph, lambda: memory_list("binop"))]
    if delta or not langgraph.available:
        e_peers.append((LANGGRAPH_DELTA, langgraph, lambda: memory_list("delta")))
    e_peers.append(
        (
            DBOS_OUTPUTS,
            dbos,
            lambda: dbos.request("step_outputs", steps=steps, payload_bytes=PAYLOAD_BYTES),
        )
    )
    e = Workload(
        "e",
        "memory_list.db_over_payload",
        f"(e) {steps} x 2 KB outputs, db / payload",
        "x",
        False,
        0,
    )
    last = measure(
        e,
        1,
        lambda: run_ours(ours_memory_list, steps=steps, payload_bytes=PAYLOAD_BYTES),
        e_peers,
        _over_payload,
    )
    e.extra["memory_list.db_bytes"] = (e.ours * steps * PAYLOAD_BYTES, "bytes")
    if "dbos" in last:
        e.extra["dbos.memory_list.empty_db_bytes"] = (last["dbos"]["empty_db_bytes"], "bytes")
    workloads.append(e)
    return workloads


# ---------------------------------------------------------------------------- driver


def _describe(langgraph: PeerSession, dbos: PeerSession) -> None:
    if langgraph.available:
        info = langgraph.info
        versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        modes = (
            'durability="sync" and "async"'
            if info["durability_sync"]
            else ("the checkpointer's default durability (this langgraph has no durability=)")
        )
        delta = (
            "DeltaChannel (beta) beside operator.add for (e)"
            if info.get("delta_channel")
            else "no DeltaChannel in this langgraph: (e) uses operator.add only"
        )
        print(f"LangGraph peer: {versions}; AsyncSqliteSaver on a file, {modes}; {delta}")
    else:
        print(f"LangGraph peer: {langgraph.reason}")
    if dbos.available:
        info = dbos.info
        print(
            f"DBOS peer: dbos {info['versions']['dbos']}; SQLite system database, "
            f"journal_mode={info['journal_mode']}, synchronous={info['synchronous']}; "
            "async workflows and steps"
        )
    else:
        print(f"DBOS peer: {dbos.reason}")


def main(quick: bool, *, peer: bool = True) -> None:
    """Run the executor benchmark and print the tables, then one line per figure.

    ``peer=False`` (or MAGISTRATE_BENCH_NO_PEER=1) skips the peers entirely.
    """
    sizes = QUICK if quick else FULL
    enabled = peer and os.environ.get("MAGISTRATE_BENCH_NO_PEER", "") in ("", "0")
    print(
        f"executor benchmark ({'quick' if quick else 'full'}): "
        f"{sizes.rounds} alternating rounds, medians; {sizes.linear_runs} durable / "
        f"{sizes.nostore_runs} in-memory linear runs, {sizes.loop_runs} loop runs, "
        f"{sizes.concurrent_rounds} concurrent round(s)"
    )
    langgraph = PeerSession("langgraph", ensure_langgraph, LANGGRAPH_SCRIPT, enabled)
    dbos = PeerSession("dbos", ensure_dbos, DBOS_SCRIPT, enabled)
    _describe(langgraph, dbos)
    started = time.perf_counter()
    try:
        workloads = run(sizes, langgraph, dbos)
    finally:
        langgraph.close()
        dbos.close()
    print_report(workloads, time.perf_counter() - started)
    print_figures(workloads)
    print_floor(FLOOR_QUICK if quick else FLOOR_FULL)
