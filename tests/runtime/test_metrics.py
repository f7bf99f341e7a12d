"""Prometheus metrics: known runs, then a scrape over real HTTP parsed by prometheus_client."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from eventstore import Snapshot, SqliteEventStore
from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmResponse,
    NodeSpec,
    RetryPolicy,
    Runtime,
    RuntimeMetrics,
    Usage,
    default_metrics,
    serve_metrics,
)
from runtime.events import RunResumed
from runtime.testing import ScriptedProvider, linear_graph, reply, tool_call

pytestmark = pytest.mark.anyio


def _load(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"ticket": str(inputs["text"]).strip()}


def _act(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"reply": f"{inputs['category']} by {inputs.get('approved_by')}"}


def _explode(inputs: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the ledger is on fire")


FUNCTIONS = {"load": _load, "act": _act, "explode": _explode}

TRIAGE = GraphSpec(
    id="triage",
    entry_node="load",
    terminal_nodes=["act"],
    pause_nodes=["act"],
    nodes=[
        NodeSpec(id="load", function="load", input_keys=["text"], output_keys=["ticket"]),
        NodeSpec(
            id="classify",
            kind="llm",
            input_keys=["ticket"],
            output_keys=["category"],
            success_criteria=["category is billing or technical"],
        ),
        NodeSpec(
            id="act",
            function="act",
            input_keys=["category", "approved_by"],
            output_keys=["reply"],
        ),
    ],
    edges=[EdgeSpec(source="load", target="classify"), EdgeSpec(source="classify", target="act")],
)

FAILING = GraphSpec(
    id="failing",
    entry_node="boom",
    nodes=[NodeSpec(id="boom", function="explode")],
    retry=RetryPolicy(max_attempts=2, initial_delay=0.001, max_delay=0.001, jitter=0.0),
)


def _turn(text: str = "", *calls: Any) -> LlmResponse:
    answer = reply(text, *calls)
    return LlmResponse(
        text=answer.text,
        tool_calls=answer.tool_calls,
        usage=Usage(input_tokens=100, output_tokens=10),
        model="scripted",
        latency_ms=250.0,
    )


def _provider() -> ScriptedProvider:
    return ScriptedProvider(
        [
            _turn("", tool_call("set_output", key="category", value="bill")),
            _turn("done"),
            _turn("", tool_call("set_output", key="category", value="billing")),
            _turn("done now"),
        ],
        judge=[
            '{"verdict": "RETRY", "confidence": 0.7, "feedback": "billing or technical"}',
            '{"verdict": "ACCEPT", "confidence": 0.9}',
        ],
    )


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a real HTTP scrape, keyed by (name, sorted labels)."""
    with serve_metrics(0, registry=registry) as server:
        assert server.url.startswith("http://127.0.0.1:")
        text = httpx.get(server.url, timeout=10).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


async def test_a_scrape_after_known_runs_counts_what_their_logs_say(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with Runtime(
        tmp_path / "runs.db", functions=FUNCTIONS, provider=_provider(), metrics=metrics
    ) as rt:
        paused = await (await rt.start(TRIAGE, input={"text": " refund "})).result()
        assert paused.status == "paused"
        approved = await rt.approve(paused.run_id, by="ops", input={"approved_by": "ops"})
        assert approved is not None
        done = await approved.result()
        assert done.status == "completed" and done.memory["reply"] == "billing by ops"
        failed = await (await rt.start(FAILING)).result()
        assert failed.status == "failed"
        samples = await anyio.to_thread.run_sync(_scrape, registry)

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("magistrate_runs_started_total") == 2
    assert value("magistrate_runs_finished_total", status="completed", quality="clean") == 1
    assert value("magistrate_runs_finished_total", status="failed", quality="failed") == 1
    assert value("magistrate_runs_active") == 0
    assert value("magistrate_run_pauses_total", reason="hitl") == 1
    assert value("magistrate_run_resumes_total") == 1
    assert value("magistrate_input_injections_total") == 0  # the approval carried the input
    assert value("magistrate_approvals_total", decision="granted") == 1
    # The two tool-call turns are counted apart, not as RETRY verdicts.
    assert value("magistrate_judge_verdicts_total", verdict="retry", level="bail_out") == 0
    assert value("magistrate_llm_tool_turns_total") == 2
    assert value("magistrate_judge_verdicts_total", verdict="retry", level="quality") == 1
    assert value("magistrate_judge_verdicts_total", verdict="accept", level="quality") == 1
    assert value("magistrate_escalations_total") == 0
    assert value("magistrate_llm_turn_seconds_count") == 4
    assert value("magistrate_llm_turn_seconds_sum") == pytest.approx(1.0)
    assert value("magistrate_llm_tokens_total", direction="input") == 400
    assert value("magistrate_llm_tokens_total", direction="output") == 40
    assert value("magistrate_node_retries_total") == 1
    # load and act, plus two attempts of boom; classify is the one llm node.
    assert value("magistrate_node_duration_seconds_count", kind="function") == 4
    assert value("magistrate_node_duration_seconds_count", kind="llm") == 1
    events = value("magistrate_eventstore_events_total")
    assert events > 20
    batches = value("magistrate_eventstore_batches_total")
    assert 0 < batches <= value("magistrate_eventstore_appends_total")
    assert value("magistrate_eventstore_append_seconds_count") >= 1
    assert value("magistrate_eventstore_batch_size_max") >= 1
    # No run, node or graph id is a label anywhere.
    names = {key for _, labels in samples for key, _ in labels}
    assert names <= {
        "status",
        "quality",
        "kind",
        "verdict",
        "level",
        "reason",
        "direction",
        "le",
        "outcome",
        "decision",
    }


async def test_per_graph_labels_are_opt_in(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry, per_graph=True)
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, metrics=metrics) as rt:
        assert (await (await rt.start(FAILING)).result()).status == "failed"
    samples = await anyio.to_thread.run_sync(_scrape, registry)
    assert samples[("magistrate_runs_started_total", (("graph", "failing"),))] == 1
    key = (
        "magistrate_runs_finished_total",
        (("graph", "failing"), ("quality", "failed"), ("status", "failed")),
    )
    assert samples[key] == 1


async def test_a_fork_counts_as_one_new_run_not_as_a_copy_of_the_old_one(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with Runtime(
        tmp_path / "runs.db", functions=FUNCTIONS, provider=_provider(), metrics=metrics
    ) as rt:
        paused = await (await rt.start(TRIAGE, input={"text": "x"})).result()
        at = (await rt.get_state(paused.run_id)).last_seq
        fork = await (await rt.fork(paused.run_id, at, input={"approved_by": "me"})).result()
        assert fork.status == "paused"  # at the gate the source waited at
        approved = await rt.approve(fork.run_id, by="me")
        assert approved is not None
        forked = await approved.result()
        assert forked.status == "completed"
    samples = await anyio.to_thread.run_sync(_scrape, registry)
    assert samples[("magistrate_runs_started_total", ())] == 2
    assert samples[("magistrate_llm_turn_seconds_count", ())] == 4  # not counted twice
    assert samples[("magistrate_runs_active", ())] == 0


async def test_in_memory_runs_are_counted_and_cancellations_finish_runs() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with Runtime(None, functions=FUNCTIONS, provider=_provider(), metrics=metrics) as rt:
        paused = await (await rt.start(TRIAGE, input={"text": "x"})).result()
        await rt.cancel(paused.run_id)
    samples = await anyio.to_thread.run_sync(_scrape, registry)
    assert (
        samples[("magistrate_runs_finished_total", (("quality", "none"), ("status", "cancelled")))]
        == 1
    )
    assert samples[("magistrate_runs_active", ())] == 0
    assert samples[("magistrate_eventstore_append_seconds_count", ())] == 0


def test_one_metrics_object_per_registry() -> None:
    registry = CollectorRegistry()
    RuntimeMetrics(registry)
    with pytest.raises(ValueError, match="Duplicated"):
        RuntimeMetrics(registry)
    assert default_metrics() is default_metrics()


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def test_the_grafana_dashboard_uses_only_these_metrics() -> None:
    registry = CollectorRegistry()
    RuntimeMetrics(registry)
    # Counter families are named without _total; their samples and histograms' add suffixes.
    families = {family.name for family in registry.collect()}
    names = families | {f + s for f in families for s in ("_bucket", "_count", "_sum", "_total")}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"magistrate_[a-z_]+", expr)}
    assert len(used) >= 15 and used <= names, used - names
    # Every metric the runtime defines is on the dashboard.
    assert families <= {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in used}


def _loop_graph(steps: int) -> GraphSpec:
    return GraphSpec(
        id="loop",
        entry_node="count",
        nodes=[NodeSpec(id="count", function="count")],
        edges=[
            EdgeSpec(
                source="count", target="count", condition="conditional", expression=f"n < {steps}"
            )
        ],
        max_steps=steps + 5,
        durability="async",
    )


def _count(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"n": int(inputs.get("n", 0)) + 1}


async def test_snapshot_reads_are_counted_by_how_the_snapshot_served_them(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with Runtime(tmp_path / "runs.db", functions={"count": _count}, metrics=metrics) as rt:
        store = rt.store
        assert store is not None
        # 300 steps of 4 events: the run's log passes a snapshot on its way.
        result = await (await rt.start(_loop_graph(300))).result()
        assert result.status == "completed"
        run_id = result.run_id
        original = await store.load_snapshot(run_id)
        assert original is not None
        await rt.get_state(run_id)  # hit
        await rt.get_state(run_id, at_seq=10)  # miss: the snapshot is past seq 10
        await store.save_snapshot(
            Snapshot(run_id, original.seq, original.hash, "another fold", original.data)
        )
        assert (await rt.get_state(run_id)).memory["n"] == 300  # stale: another fold's
        await store.save_snapshot(
            msgspec.structs.replace(original, data=original.data.replace(b'"n":', b'"n" :'))
        )
        assert (await rt.get_state(run_id)).memory["n"] == 300  # stale: other bytes
        await store.save_snapshot(original)
        await rt.get_state(run_id)  # hit: bound by its snapshot.taken event
        await store.delete_snapshots(run_id)
        await rt.get_state(run_id)  # miss, and a read saves no snapshot
        assert await store.load_snapshot(run_id) is None
        samples = await anyio.to_thread.run_sync(_scrape, registry)
    reads = {
        outcome: samples[("magistrate_snapshot_reads_total", (("outcome", outcome),))]
        for outcome in ("hit", "miss", "stale")
    }
    assert reads == {"hit": 2, "miss": 2, "stale": 2}


async def test_group_commit_sizes_are_a_histogram_of_the_stores_batches(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    async with SqliteEventStore(tmp_path / "runs.db") as store:
        metrics.watch_store(store)
        for seq in range(5):  # one at a time: five commits of one append each
            await store.append("alone", [RunResumed()], expected_seq=seq)

        async def append(run_id: str) -> None:
            await store.append(run_id, [RunResumed()], expected_seq=0)

        async with anyio.create_task_group() as tasks:
            for i in range(40):
                tasks.start_soon(append, f"crowd{i}")
        stats = store.statistics()
        samples = await anyio.to_thread.run_sync(_scrape, registry)

    def bucket(le: str) -> float:
        return samples[("magistrate_eventstore_batch_size_bucket", (("le", le),))]

    assert stats.appends == 45
    assert samples[("magistrate_eventstore_batch_size_count", ())] == stats.batches
    assert samples[("magistrate_eventstore_batch_size_sum", ())] == 45
    assert bucket("+Inf") == stats.batches
    assert bucket("1") >= 5
    bounds = ["1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "+Inf"]
    assert [bucket(b) for b in bounds] == sorted(bucket(b) for b in bounds)
    # The largest batch lies in the first bucket whose bound holds it.
    largest = next(b for b in bounds if bucket(b) == stats.batches)
    assert largest == "+Inf" or int(largest) >= stats.max_batch_size


async def test_a_node_that_blocks_the_event_loop_shows_in_the_loop_lag_gauge(
    tmp_path: Path,
) -> None:
    import time

    async def blocks(inputs: dict[str, Any]) -> dict[str, Any]:
        time.sleep(1.0)  # noqa: ASYNC251  (what a C call holding the GIL does)
        return {}

    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    graph = GraphSpec(id="g", nodes=[NodeSpec(id="a", function="blocks")], entry_node="a")
    async with Runtime(None, functions={"blocks": blocks}, metrics=metrics) as rt:
        assert (await (await rt.start(graph)).result()).status == "completed"
        await anyio.sleep(0.3)  # the wake-up after the stall has been measured
        stalled = await anyio.to_thread.run_sync(_scrape, registry)
    # The loop was held for a second; the watcher slept a quarter of it at most.
    assert stalled[("magistrate_event_loop_lag_seconds", ())] >= 0.7


async def test_a_submitted_run_counts_as_started_where_it_was_submitted(tmp_path: Path) -> None:
    # A worker that claims it counts its resume and its end: started + finished add up
    # across the processes.
    registry = CollectorRegistry()
    async with Runtime(tmp_path / "runs.db", metrics=RuntimeMetrics(registry)) as rt:
        await rt.submit(linear_graph(["a"]))
        samples = await anyio.to_thread.run_sync(_scrape, registry)
    assert samples[("magistrate_runs_started_total", ())] == 1
    assert samples[("magistrate_runs_active", ())] == 0  # nobody executes it here
