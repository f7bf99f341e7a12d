"""Metrics attacked against the logs they describe: the store's counters of a runtime that
closed stay in the totals (a counter never goes back), the loop lag gauge goes back to 0
once no runtime measures it, input handed to the workers with a resumption is counted
where it was handed, a start that meets the runtime closing leaves no run active, and a
provider's impossible figures neither stop the count nor poison it."""

from __future__ import annotations

import gc
import math
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from prometheus_client import CollectorRegistry

from eventstore import SqliteEventStore
from runtime import (
    EdgeSpec,
    GraphSpec,
    LlmResponse,
    NodeSpec,
    OwnershipConfig,
    RecoveryConfig,
    Runtime,
    RuntimeMetrics,
    Usage,
)
from runtime.events import InputInjected
from runtime.testing import ScriptedProvider, linear_graph, reply, tool_call
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio


def _step(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"n": inputs.get("n", 0) + 1}


FUNCTIONS = {"a": _step, "b": _step}
LINEAR = linear_graph(["a", "b"])


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_the_stores_counters_keep_what_a_closed_runtime_committed(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    rt = Runtime(tmp_path / "runs.db", functions=FUNCTIONS, metrics=metrics)
    async with rt:
        await (await rt.start(LINEAR)).result()
    first = _value(registry, "magistrate_eventstore_events_total")
    appends = _value(registry, "magistrate_eventstore_appends_total")
    assert first > 0 and appends > 0
    # The same Runtime opened again opens a new store; the first one is let go.
    async with rt:
        assert _value(registry, "magistrate_eventstore_events_total") == first
        await (await rt.start(LINEAR)).result()
    del rt
    gc.collect()
    assert _value(registry, "magistrate_eventstore_events_total") == 2 * first
    assert _value(registry, "magistrate_eventstore_appends_total") == 2 * appends
    batches = _value(registry, "magistrate_eventstore_batches_total")
    assert _value(registry, "magistrate_eventstore_batch_size_count") == batches
    assert _value(registry, "magistrate_eventstore_batch_size_max") >= 1
    # The append latency the metrics observe themselves agrees with the store's appends.
    assert _value(registry, "magistrate_eventstore_append_seconds_count") <= 2 * appends


async def test_a_store_runtimes_share_is_counted_once_and_kept_once_let_go(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    store = SqliteEventStore(tmp_path / "runs.db")
    async with store:
        async with Runtime(store, functions=FUNCTIONS, metrics=metrics) as one:
            async with Runtime(store, functions=FUNCTIONS, metrics=metrics) as two:
                await (await two.start(LINEAR)).result()
            await (await one.start(LINEAR)).result()  # two closed: the store is still read
        async with Runtime(store, functions=FUNCTIONS, metrics=metrics) as three:
            await (await three.start(LINEAR)).result()
    stats = store.statistics()
    del store, one, two, three
    gc.collect()
    assert _value(registry, "magistrate_eventstore_events_total") == stats.events
    assert _value(registry, "magistrate_eventstore_appends_total") == stats.appends
    assert _value(registry, "magistrate_eventstore_batches_total") == stats.batches
    assert _value(registry, "magistrate_eventstore_commit_seconds_total") == pytest.approx(
        stats.commit_seconds_total
    )


async def test_the_loop_lag_gauge_is_0_once_no_runtime_measures_it(tmp_path: Path) -> None:
    async def blocks(inputs: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.5)  # noqa: ASYNC251  (what a C call holding the GIL does)
        return {}

    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    graph = GraphSpec(id="g", nodes=[NodeSpec(id="a", function="blocks")], entry_node="a")
    async with Runtime(None, functions={"blocks": blocks}, metrics=metrics) as rt:
        assert (await (await rt.start(graph)).result()).status == "completed"

        async def measured() -> bool:
            return _value(registry, "magistrate_event_loop_lag_seconds") > 0

        await wait_until(measured, 30)
    # Closed: nothing measures the loop, and no stall of the past is shown as current.
    assert _value(registry, "magistrate_event_loop_lag_seconds") == 0


#: take -> slow: a run paused before ``slow`` is handed to the workers.
HANDED = GraphSpec(
    id="handed",
    entry_node="a",
    nodes=[NodeSpec(id="a", function="a"), NodeSpec(id="b", function="b")],
    edges=[EdgeSpec(source="a", target="b")],
)


async def test_input_handed_to_the_workers_is_counted_where_it_was_handed(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    here, worker = CollectorRegistry(), CollectorRegistry()
    async with Runtime(path, metrics=RuntimeMetrics(here)) as rt:
        run_id = await rt.submit(HANDED)
        await rt.pause(run_id)  # nothing executes it: paused at once
        await rt.submit_resume(run_id, input={"note": "from ops"})
    assert _value(here, "magistrate_input_injections_total") == 1
    assert _value(here, "magistrate_run_pauses_total", reason="user") == 1
    async with Runtime(
        path,
        functions=FUNCTIONS,
        metrics=RuntimeMetrics(worker),
        ownership=OwnershipConfig(worker_id="worker", lease_seconds=5.0),
        recovery=RecoveryConfig(interval=0.05),
    ) as rt:

        async def ended() -> bool:
            return _value(worker, "magistrate_runs_finished_total", **_DONE) == 1

        await wait_until(ended, 60)
        events = await rt.read_events(run_id)
    assert [e.body for e in events if isinstance(e.body, InputInjected)] == [
        InputInjected(data={"note": "from ops"})
    ]
    # The worker counts the resumption it executes, and not the input again.
    assert _value(worker, "magistrate_run_resumes_total") == 1
    assert _value(worker, "magistrate_input_injections_total") == 0
    assert _value(here, "magistrate_run_resumes_total") == 0


_DONE = {"status": "completed", "quality": "clean"}


async def test_a_start_that_meets_the_runtime_closing_leaves_no_run_active(tmp_path: Path) -> None:
    async def waits(inputs: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(60)
        return {}

    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    graph = GraphSpec(id="g", nodes=[NodeSpec(id="a", function="waits")], entry_node="a")
    rt = Runtime(tmp_path / "runs.db", functions={"waits": waits}, metrics=metrics)
    refused: list[BaseException] = []

    async def keep_starting() -> None:
        while True:
            try:
                await rt.start(graph)
            except Exception as exc:  # the runtime closes under it: any refusal ends it
                refused.append(exc)
                return
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        await rt.__aenter__()
        tg.start_soon(keep_starting)

        async def started() -> bool:
            return _value(registry, "magistrate_runs_started_total") > 0

        await wait_until(started, 30)
        await rt.__aexit__(None, None, None)  # starts go on meanwhile
    assert refused
    assert _value(registry, "magistrate_runs_active") == 0


async def test_a_providers_impossible_figures_neither_stop_the_count_nor_poison_it(
    tmp_path: Path,
) -> None:
    """A custom provider's answers with a latency that is not a number or is negative:
    the run's events count, and no counter goes back or turns NaN (the runtime records its
    own measurement instead; an impossible token count never reaches the log, see
    test_tokens_router_goal.py)."""
    calls = reply("", tool_call("set_output", key="out", value="x")).tool_calls
    odd = LlmResponse(tool_calls=calls, usage=Usage(output_tokens=3), latency_ms=math.nan)
    late = LlmResponse(text="done", usage=Usage(input_tokens=7), latency_ms=-1000.0)
    provider = ScriptedProvider([odd, late])
    graph = GraphSpec(
        id="g", entry_node="l", nodes=[NodeSpec(id="l", kind="llm", output_keys=["out"])]
    )
    registry = CollectorRegistry()
    async with Runtime(
        tmp_path / "runs.db", provider=provider, metrics=RuntimeMetrics(registry)
    ) as rt:
        result = await (await rt.start(graph)).result()
    assert result.status == "completed"
    assert _value(registry, "magistrate_runs_finished_total", **_DONE) == 1
    assert _value(registry, "magistrate_llm_tool_turns_total") == 1
    assert _value(registry, "magistrate_llm_tokens_total", direction="output") == 3
    assert _value(registry, "magistrate_llm_tokens_total", direction="input") == 7
    assert _value(registry, "magistrate_llm_turn_seconds_count") == 2
    seconds = _value(registry, "magistrate_llm_turn_seconds_sum")
    assert math.isfinite(seconds) and seconds >= 0
