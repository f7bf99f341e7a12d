"""Taking another process's pause request into a live log renumbers what the live state
recorded after it, so the live state stays the fold of the log: verdicts, stall warnings
and judge failures (the seqs the state keeps) all move."""

from __future__ import annotations

from dataclasses import dataclass

from eventstore import Event, EventBody, EventStore
from runtime.engine._foreign import _take
from runtime.events import (
    EdgeTaken,
    NodeStarted,
    PauseRequested,
    RunStarted,
    RunState,
    fold,
)


@dataclass
class _Log:
    run_id: str
    store: EventStore | None
    state: RunState
    last_seq: int
    snapshot_seq: int
    in_flight: int = 0
    failed: BaseException | None = None


def _events(bodies: list[EventBody]) -> list[Event]:
    return [
        Event(
            run_id="r",
            seq=seq,
            position=seq,
            ts=0.0,
            version=1,
            prev_hash="",
            hash="",
            body=body,
        )
        for seq, body in enumerate(bodies, start=1)
    ]


def test_a_judge_failure_recorded_after_the_request_moves_with_it() -> None:
    started = RunStarted(graph={"id": "g"}, graph_hash="h", entry="a")
    failed_route = EdgeTaken(
        source="a", target="b", edge_index=0, condition="llm_decide", judge_error="timeout"
    )
    mine = [started, NodeStarted(node_id="a", visit=1), failed_route]
    live = fold(_events(mine))  # the owner's live state: its edge at seq 3
    assert [f.seq for f in live.judge_failure_reasons] == [3]
    log = _Log(run_id="r", store=None, state=live, last_seq=3, snapshot_seq=0)

    request = _events([started, NodeStarted(node_id="a", visit=1), PauseRequested(by="ops")])[2:]
    assert _take(log, 2, request) == 1

    # The log as it is: the request at seq 3, the owner's edge after it.
    truth = fold(
        _events([started, NodeStarted(node_id="a", visit=1), PauseRequested(), failed_route])
    )
    assert [f.seq for f in log.state.judge_failure_reasons] == [4]
    assert log.state.judge_failure_reasons == truth.judge_failure_reasons
    assert log.state.pause_requested and truth.pause_requested
    assert log.last_seq == 4 and log.state.last_seq == truth.last_seq
