"""Taking another process's pause request into a live log refolds the live state from the
committed log (the request included) and applies the owner's staged bodies after it, so
the live state stays the fold of the log: the seqs it records after the request
(verdicts, stall warnings, judge failures) move with no hand-kept renumbering."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eventstore import EventBody, EventStore, SqliteEventStore
from runtime.engine._foreign import refold
from runtime.events import EdgeTaken, NodeStarted, PauseRequested, RunStarted, RunState, fold
from runtime.events._state import apply

pytestmark = pytest.mark.anyio


@dataclass
class _Log:
    run_id: str
    store: EventStore | None
    state: RunState
    last_seq: int
    snapshot_seq: int
    pending: list[EventBody] = field(default_factory=list)


async def test_a_judge_failure_staged_after_the_request_moves_with_it(tmp_path: Path) -> None:
    started = RunStarted(graph={"id": "g"}, graph_hash="h", entry="a")
    failed_route = EdgeTaken(
        source="a", target="b", edge_index=0, condition="llm_decide", judge_error="timeout"
    )
    async with SqliteEventStore(tmp_path / "r.db") as store:
        mine: list[EventBody] = [started, NodeStarted(node_id="a", visit=1)]
        await store.append("r", mine, expected_seq=0)
        # The owner's live state: its edge staged at seq 3, not committed yet.
        live = fold(await store.read_all("r"))
        held = live  # the executor and the nodes hold this object
        apply(live, failed_route, 3)
        live.last_seq = 3
        assert [f.seq for f in live.judge_failure_reasons] == [3]
        # Another process's request lands at seq 3.
        await store.append("r", [PauseRequested(by="ops")], expected_seq=2)
        log = _Log(run_id="r", store=store, state=live, last_seq=2, snapshot_seq=0)
        log.pending = [failed_route]
        await refold(log, 3)
        truth_events = await store.read_all("r")
    truth = fold(truth_events)
    apply(truth, failed_route, 4)
    truth.last_seq = 4
    assert log.state is held  # the same object, refolded
    assert [f.seq for f in log.state.judge_failure_reasons] == [4]
    assert log.state.judge_failure_reasons == truth.judge_failure_reasons
    assert log.state.pause_requested
    assert log.last_seq == 3 and log.state.last_seq == 4
    assert log.state == truth
