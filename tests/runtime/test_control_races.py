"""Controls that race, from two runtimes on one store (SQLite and PostgreSQL), 50 pairs
each: the loser is answered with what happened (RunChangedError: "already cancelled",
"already completed"), never undoes the winner, and no claim is left behind. A resume that
loses never returns a status it did not make."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, RunChangedError, RunStateError, Runtime
from runtime.testing import function_node

pytestmark = pytest.mark.anyio

PAIRS = 50

GRAPH = GraphSpec(
    id="steps",
    nodes=[function_node("a", output_keys=["a"]), function_node("b", output_keys=["b"])],
    edges=[EdgeSpec(source="a", target="b")],
    entry_node="a",
)


class Steps:
    """``a`` waits until told, so a pause asked for while it runs holds ``b``."""

    def __init__(self) -> None:
        self.go = anyio.Event()

    async def a(self, inputs: dict[str, Any]) -> dict[str, Any]:
        await self.go.wait()
        return {"a": 1}

    def functions(self) -> dict[str, Any]:
        return {"a": self.a, "b": lambda inputs: {"b": 2}}


async def _paused(rt: Runtime, steps: Steps) -> str:
    """A run paused (reason user) before ``b``."""
    steps.go = anyio.Event()
    handle = await rt.start(GRAPH)
    await rt.pause(handle.run_id)
    steps.go.set()
    result = await handle.result()
    assert (result.status, result.resume_at) == ("paused", ["b"])
    return handle.run_id


def _tags(events: list[Any]) -> list[str]:
    return [e.body.__struct_config__.tag for e in events]


async def _no_claims(store: str, ids: list[str]) -> None:
    async with Runtime(store) as reader:
        assert reader.store is not None
        for run_id in ids:
            info = await reader.store.get_run(run_id)
            assert info is not None and info.owner is None, run_id


async def test_two_cancels_one_wins_the_other_says_already_cancelled(store: str) -> None:
    steps = Steps()
    async with (
        Runtime(store, functions=steps.functions()) as one,
        Runtime(store) as two,
    ):
        ids = [await _paused(one, steps) for _ in range(PAIRS)]
        answers: dict[str, list[str]] = {run_id: [] for run_id in ids}

        async def cancel(rt: Runtime, run_id: str, who: str) -> None:
            try:
                await rt.cancel(run_id, reason=who)
                answers[run_id].append("cancelled")
            except RunChangedError as exc:
                assert exc.status == "cancelled" and "already cancelled" in str(exc)
                answers[run_id].append("already")

        for run_id in ids:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel, one, run_id, "one")
                tg.start_soon(cancel, two, run_id, "two")
        logs = {run_id: await one.read_events(run_id) for run_id in ids}
    for run_id in ids:
        assert sorted(answers[run_id]) == ["already", "cancelled"]
        assert _tags(logs[run_id]).count("run.cancelled") == 1
    await _no_claims(store, ids)


async def test_a_pause_racing_the_run_s_end_is_obeyed_or_says_already_completed(
    store: str,
) -> None:
    steps = Steps()
    async with (
        Runtime(store, functions=steps.functions()) as owner,
        Runtime(store) as other,
    ):
        outcomes: dict[str, tuple[str, str]] = {}
        for _ in range(PAIRS):
            steps.go = anyio.Event()
            steps.go.set()  # the run goes straight to its end
            handle = await owner.start(GRAPH)
            try:
                await other.pause(handle.run_id)
                answer = "requested"
            except RunChangedError as exc:
                assert exc.status == "completed" and "already completed" in str(exc)
                answer = "already"
            outcomes[handle.run_id] = (answer, (await handle.result()).status)
        logs = {run_id: await owner.read_events(run_id) for run_id in outcomes}
    for run_id, (answer, status) in outcomes.items():
        tags = _tags(logs[run_id])
        assert status in ("completed", "paused"), tags
        assert tags.count("run.paused") <= 1 and tags.count("run.pause_requested") <= 1
        if answer == "already":
            assert status == "completed" and "run.pause_requested" not in tags
        if status == "paused":  # obeyed at a node boundary: before b, after a completed
            assert tags[-1] in ("run.paused", "snapshot.taken") and "run.finished" not in tags
        if "run.finished" in tags:  # nothing is recorded after the run's end
            assert tags.index("run.finished") >= len(tags) - 2
    await _no_claims(store, list(outcomes))


async def test_a_resume_racing_a_cancel_acts_or_says_what_happened(store: str) -> None:
    steps = Steps()
    async with (
        Runtime(store, functions=steps.functions()) as resumer,
        Runtime(store) as canceller,
    ):
        ids = [await _paused(resumer, steps) for _ in range(PAIRS)]
        outcomes: dict[str, str] = {}

        async def resume(run_id: str) -> None:
            try:
                handle = await resumer.resume(run_id)
                outcomes[run_id] = (await handle.result()).status
            except RunChangedError as exc:
                assert exc.status == "cancelled"
                outcomes[run_id] = "lost"

        async def cancel(run_id: str) -> None:
            with contextlib.suppress(RunStateError):  # it finished first
                await canceller.cancel(run_id, reason="no")

        for run_id in ids:
            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, run_id)
                tg.start_soon(cancel, run_id)
        for run_id in ids:
            with anyio.fail_after(10):
                while (await resumer.get_state(run_id)).status == "running":  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # a cancel from elsewhere reaches the owner
        states = {run_id: await resumer.get_state(run_id) for run_id in ids}
        logs = {run_id: await resumer.read_events(run_id) for run_id in ids}
    for run_id in ids:
        tags = _tags(logs[run_id])
        after = tags[tags.index("run.paused") + 1 :]
        if outcomes[run_id] == "lost":
            # The cancel won: the resume recorded nothing and said so.
            assert after == ["run.cancelled"], tags
            assert states[run_id].status == "cancelled"
        else:
            # The resume acted (run.resumed on record: after the pause, or after a cancel
            # it read, which a resume continues) and reported what its run did.
            assert "run.resumed" in after and after[0] in ("run.resumed", "run.cancelled")
            assert outcomes[run_id] == states[run_id].status
            assert states[run_id].status in ("completed", "cancelled")
        assert tags.count("run.cancelled") <= 2
    await _no_claims(store, ids)
