"""The run counters stay consistent over a run's whole life, summed over every process
that touched it: a cancelled run resumed to its end counts as reopened (runs not ended =
started + reopened - finished, never negative); a fork counts as a fork, not as a resume;
a worker's first execution of a submitted run is not a resume; a run that nothing executes
here and is ended here (a cancel or a gate's rejection) counts under its graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtime import (
    EdgeSpec,
    GraphSpec,
    NodeSpec,
    OwnershipConfig,
    RecoveryConfig,
    Runtime,
    RuntimeMetrics,
)
from tests.pgsupport import wait_until

pytestmark = pytest.mark.anyio


def _take(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"seen": inputs.get("text", "")}


FUNCTIONS = {"take": _take}

#: take -> [gate] give: a run pauses before ``give`` until approved.
GATED = GraphSpec(
    id="gated",
    entry_node="take",
    terminal_nodes=["give"],
    pause_nodes=["give"],
    nodes=[
        NodeSpec(id="take", function="take", output_keys=["seen"]),
        NodeSpec(id="give", function="take", output_keys=["seen"]),
    ],
    edges=[EdgeSpec(source="take", target="give")],
)


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples in ``registry`` whose labels include ``labels``."""
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def _not_ended(*registries: CollectorRegistry) -> float:
    """What a user charts as the runs not ended yet, summed over the processes."""
    return sum(
        _value(r, "magistrate_runs_started_total")
        + _value(r, "magistrate_runs_reopened_total")
        - _value(r, "magistrate_runs_finished_total")
        for r in registries
    )


async def test_a_cancelled_run_resumed_in_another_process_counts_as_reopened(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    first, second = CollectorRegistry(), CollectorRegistry()
    async with Runtime(path, functions=FUNCTIONS, metrics=RuntimeMetrics(first)) as rt:
        paused = await (await rt.start(GATED)).result()
        await rt.cancel(paused.run_id)  # ended: counted finished here
        assert _not_ended(first) == 0
    async with Runtime(path, functions=FUNCTIONS, metrics=RuntimeMetrics(second)) as rt:
        again = await (await rt.resume(paused.run_id)).result()
        assert again.status == "paused"  # at its gate again: not ended
        assert _not_ended(first, second) == 1
        approved = await rt.approve(paused.run_id, by="ops")
        assert approved is not None
        assert (await approved.result()).status == "completed"
    assert _value(second, "magistrate_runs_reopened_total") == 1
    assert _value(second, "magistrate_runs_started_total") == 0  # a resume is not a start
    assert _value(second, "magistrate_run_resumes_total") == 2  # the reopening, the approval
    done = {"status": "completed", "quality": "clean"}
    assert _value(second, "magistrate_runs_finished_total", **done) == 1
    assert _not_ended(first, second) == 0  # one run, started once and ended twice


async def test_a_fork_counts_as_a_forked_start_and_its_first_step_as_no_resume(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry, per_graph=True)
    gated = {"graph": "gated"}
    async with Runtime(tmp_path / "runs.db", functions=FUNCTIONS, metrics=metrics) as rt:
        paused = await (await rt.start(GATED)).result()
        at = (await rt.get_state(paused.run_id)).last_seq
        fork = await (await rt.fork(paused.run_id, at)).result()
        assert fork.status == "paused"  # at the gate the source waits at
        assert _value(registry, "magistrate_run_resumes_total") == 0
        assert _value(registry, "magistrate_runs_forked_total", **gated) == 1
        assert _value(registry, "magistrate_runs_started_total", **gated) == 2
        # A fork of a cancelled run is a new run, not the cancelled one reopened.
        await rt.cancel(paused.run_id)
        at = (await rt.get_state(paused.run_id)).last_seq
        second = await (await rt.fork(paused.run_id, at)).result()
        assert second.status == "paused"
        assert _value(registry, "magistrate_runs_reopened_total", **gated) == 0
        assert _value(registry, "magistrate_run_resumes_total") == 0
        approved = await rt.approve(fork.run_id, by="ops")  # an approval is a resume
        assert approved is not None
        assert (await approved.result()).status == "completed"
    assert _value(registry, "magistrate_runs_forked_total", **gated) == 2
    assert _value(registry, "magistrate_runs_started_total", **gated) == 3
    assert _value(registry, "magistrate_run_resumes_total") == 1
    assert _not_ended(registry) == 1  # the second fork, at its gate


async def test_a_workers_first_execution_of_a_submitted_run_is_not_a_resume(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    submitter, worker = CollectorRegistry(), CollectorRegistry()
    async with Runtime(path, metrics=RuntimeMetrics(submitter)) as rt:
        await rt.submit(GATED, input={"text": "for a worker"})
    async with Runtime(
        path,
        functions=FUNCTIONS,
        metrics=RuntimeMetrics(worker),
        ownership=OwnershipConfig(worker_id="worker", lease_seconds=5.0),
        recovery=RecoveryConfig(interval=0.05),
    ):

        async def paused() -> bool:
            return _value(worker, "magistrate_run_pauses_total", reason="hitl") == 1

        await wait_until(paused, 60)
    assert _value(submitter, "magistrate_runs_started_total") == 1
    assert _value(worker, "magistrate_runs_started_total") == 0
    assert _value(worker, "magistrate_run_resumes_total") == 0  # it had never run
    assert _value(worker, "magistrate_runs_active") == 0  # paused: it executes nowhere


async def test_a_run_paused_elsewhere_and_ended_here_counts_under_its_graph(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with Runtime(path, functions=FUNCTIONS) as rt:  # another process, no metrics
        cancelled = await (await rt.start(GATED)).result()
        rejected = await (await rt.start(GATED)).result()
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry, per_graph=True)
    async with Runtime(path, functions=FUNCTIONS, metrics=metrics) as rt:
        await rt.cancel(cancelled.run_id)
        assert await rt.reject(rejected.run_id, by="ops", reason="no") is None  # ended
    cancel = {"status": "cancelled", "quality": "none"}
    assert _value(registry, "magistrate_runs_finished_total", graph="gated", **cancel) == 2
    assert _value(registry, "magistrate_runs_finished_total", graph="unknown") == 0
