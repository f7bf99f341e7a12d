"""A run's detail is its folded state: the first request for a long run reads its snapshot
and the events after it, never the whole log, and shows what a fold of the whole log gives
(each LLM node's newest verdicts and stalls, the edges taken, the events by type)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from eventstore import Event, EventBody, EventStore, SqliteEventStore, event_tag
from runtime import EdgeSpec, GraphSpec, NodeSpec
from runtime.events import (
    EdgeTaken,
    NodeCompleted,
    NodeStarted,
    RunFinished,
    RunStarted,
    StallDetected,
    Verdict,
    fold,
)
from runtime.events._snapshots import load_state
from runtime.events._verdicts import KEPT_PER_NODE
from runtime.testing import ScriptedProvider, reply, tool_call

from ..snapshot_support import save_bound_snapshot
from .support import served

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


class ReadCounter:
    """Counts the events a store's reads hand out (each one read and decoded)."""

    def __init__(self, store: EventStore) -> None:
        self.events = 0
        read, read_all = store.read, store.read_all

        def counted_read(*args: Any, **kwargs: Any) -> AsyncIterator[Event]:
            async def events() -> AsyncIterator[Event]:
                async for event in read(*args, **kwargs):
                    self.events += 1
                    yield event

            return events()

        async def counted_read_all(*args: Any, **kwargs: Any) -> list[Event]:
            events = await read_all(*args, **kwargs)
            self.events += len(events)
            return events

        store.read = counted_read  # type: ignore[method-assign]
        store.read_all = counted_read_all  # type: ignore[method-assign]


def expected_judging(events: Sequence[Event]) -> dict[str, Any]:
    """What the detail shows of a log's verdicts, stalls, edges and event types, worked out
    from every event of the log (not from the fold)."""
    graph = events[0].body.graph if isinstance(events[0].body, RunStarted) else {}
    order = [n["id"] for n in graph.get("nodes", []) if n.get("kind") == "llm"]
    verdicts: dict[str, list[dict[str, Any]]] = {}
    stalls: dict[str, list[dict[str, Any]]] = {}
    edges: list[str] = []
    counts: dict[str, int] = {}
    for event in events:
        body = event.body
        counts[event_tag(body)] = counts.get(event_tag(body), 0) + 1
        if isinstance(body, Verdict):
            verdicts.setdefault(body.node_id, []).append(
                {
                    "seq": event.seq,
                    "iteration": body.iteration,
                    "action": body.action,
                    "level": body.level,
                    "feedback": body.feedback,
                    "confidence": body.confidence,
                    "error": body.error,
                }
            )
        elif isinstance(body, StallDetected):
            stalls.setdefault(body.node_id, []).append(
                {"seq": event.seq, "iteration": body.iteration, "signature": body.signature}
            )
        elif isinstance(body, EdgeTaken) and f"{body.source}>{body.target}" not in edges:
            edges.append(f"{body.source}>{body.target}")
    for node_id in [*verdicts, *stalls]:
        if node_id not in order:
            order.append(node_id)
    return {
        "llm_nodes": [
            {
                "node_id": node_id,
                "verdicts": verdicts.get(node_id, [])[-KEPT_PER_NODE:],
                "stalls": stalls.get(node_id, [])[-KEPT_PER_NODE:],
                "total_verdicts": sum(v["level"] != "bail_out" for v in verdicts.get(node_id, [])),
                "tool_turns": sum(v["level"] == "bail_out" for v in verdicts.get(node_id, [])),
            }
            for node_id in order
        ],
        "edges_taken": edges,
        "event_counts": counts,
    }


def folded(events: Sequence[Event]) -> dict[str, Any]:
    """The parts of the detail that are the fold's state as it is."""
    state = fold(events)
    return {
        "memory": state.memory,
        "path": state.path,
        "pending": state.pending,
        "visit_counts": state.visit_counts,
        "failed_nodes": state.failed_nodes,
        "total_retries": state.total_retries,
    }


def shown(detail: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    judging = {k: detail[k] for k in ("llm_nodes", "edges_taken", "event_counts")}
    state = {k: detail[k] for k in ("memory", "path", "pending", "visit_counts")}
    state |= {k: detail[k] for k in ("failed_nodes", "total_retries")}
    return judging, state


def long_log(rounds: int) -> list[EventBody]:
    """Two LLM nodes taking turns, judged with feedback; a stall warning now and then."""
    graph = {
        "id": "long",
        "nodes": [{"id": "a", "kind": "llm"}, {"id": "b", "kind": "llm"}, {"id": "f"}],
    }
    events: list[EventBody] = [RunStarted(graph=graph, graph_hash="h", entry="a")]
    for i in range(rounds):
        node, other = ("a", "b") if i % 3 else ("b", "a")
        events += [
            NodeStarted(node_id=node, visit=i + 1),
            Verdict(
                node_id=node,
                iteration=i,
                action="retry",
                level="quality",
                feedback=f"round {i}: name the flight",
                confidence=0.4,
            ),
            Verdict(node_id=node, iteration=i + 1, action="accept", level="structural"),
            NodeCompleted(node_id=node),
            EdgeTaken(source=node, target=other, edge_index=0, condition="always"),
        ]
        if i % 97 == 0:
            events.append(StallDetected(node_id=node, iteration=i, signature=f"[{i}]"))
    return events


async def test_the_first_detail_of_a_long_run_reads_only_the_events_after_its_snapshot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as store:
        body = long_log(900)  # 4,511 events
        seq = 0
        for start in range(0, len(body), 500):
            batch = body[start : start + 500]
            seq = (await store.append("long", batch, expected_seq=seq)).last_seq
        # The snapshot a run of this length has, saved as its owner saves one.
        state, _, _snapshot = await load_state(store, "long")
        snapshot = await save_bound_snapshot(store, state)
        seq = snapshot.seq
        finished = RunFinished(status="completed", quality="clean")
        tail: list[EventBody] = [*long_log(1)[1:], finished]
        seq = (await store.append("long", tail, expected_seq=seq)).last_seq
        events = await store.read_all("long")
    async with served(path) as s:
        assert s.runtime.store is not None
        reads = ReadCounter(s.runtime.store)
        detail = (await s.client.get("/api/runs/long")).json()
        # The snapshot's event, the seven after it and the run's last two events (its
        # summary, which looks past a trailing snapshot.taken): a reader of the whole log
        # would have decoded all 4,518.
        assert reads.events <= len(tail) + 3 < len(events) // 100
        assert shown(detail) == (expected_judging(events), folded(events))
        (a, b) = detail["llm_nodes"]
        assert a["total_verdicts"] == 1200 and len(a["verdicts"]) == KEPT_PER_NODE
        assert b["total_verdicts"] == 602 and b["verdicts"][-1]["seq"] == seq - 4  # the tail's
        assert [x["iteration"] for x in a["stalls"]] == [97, 194, 388, 485, 679, 776]
        assert [x["iteration"] for x in b["stalls"]] == [0, 291, 582, 873, 0]


def drafts_graph(rounds: int) -> GraphSpec:
    return GraphSpec(
        id="drafts",
        conversation_mode="isolated",
        max_steps=10 * rounds,
        nodes=[
            NodeSpec(
                id="draft",
                kind="llm",
                output_keys=["draft"],
                success_criteria=["Names a flight number."],
            ),
            NodeSpec(id="tick", kind="function", function="tick", input_keys=["count"]),
            NodeSpec(id="done", kind="function", function="step"),
        ],
        edges=[
            EdgeSpec(source="draft", target="tick"),
            EdgeSpec(
                source="tick",
                target="draft",
                condition="conditional",
                expression=f"count < {rounds}",
            ),
            EdgeSpec(source="tick", target="done", condition="always"),
        ],
        entry_node="draft",
    )


def drafts_script(rounds: int) -> ScriptedProvider:
    """Each round a vague draft RETRIED with feedback, then a specific one accepted; the
    first round starts with the same tool call three turns running (a stall warning)."""
    turns: list[Any] = [reply("", tool_call("set_output", key="draft", value="same"))] * 3
    judge: list[Any] = []
    for i in range(rounds):
        turns += [
            reply("", tool_call("set_output", key="draft", value=f"somewhere {i}")),
            reply("Done."),
            reply("", tool_call("set_output", key="draft", value=f"TP {i}")),
            reply("Done."),
        ]
        judge += [
            f'{{"verdict": "RETRY", "confidence": 0.4, "feedback": "round {i}: be specific"}}',
            '{"verdict": "ACCEPT", "confidence": 0.9, "feedback": "Specific."}',
        ]
    return ScriptedProvider(turns, judge=judge)


async def test_a_long_judged_runs_detail_equals_the_fold_of_its_whole_log(
    tmp_path: Path,
) -> None:
    # The snapshots here are the live run's own state (its verdicts numbered as the run
    # log numbered them): the detail read through them equals the fold of the whole log,
    # and equals itself once every snapshot is deleted.
    rounds = 140  # four verdicts a round
    async with served(tmp_path / "runs.db", provider=drafts_script(rounds)) as s:
        rt, store = s.runtime, s.runtime.store
        assert store is not None
        result = await (await rt.start(drafts_graph(rounds))).result()
        assert result.status == "completed", result.error
        events = await rt.read_events(result.run_id)
        snapshot = await store.load_snapshot(result.run_id)
        assert snapshot is not None and 1000 <= snapshot.seq < len(events)
        assert await rt.get_state(result.run_id) == fold(events)

        url = f"/api/runs/{result.run_id}"
        detail = (await s.client.get(url)).json()
        assert shown(detail) == (expected_judging(events), folded(events))
        (draft,) = detail["llm_nodes"]
        shown_all = draft["total_verdicts"] + draft["tool_turns"]
        assert shown_all > KEPT_PER_NODE == len(draft["verdicts"])
        assert "round 139: be specific" in [v["feedback"] for v in draft["verdicts"]]
        assert [x["iteration"] for x in draft["stalls"]] == [3]
        assert detail["edges_taken"] == ["draft>tick", "tick>draft", "tick>done"]
        # Read through the snapshot: the chain is checked from its seq to the run's end.
        assert detail["chain"] == {
            "ok": True,
            "scope": "tail",
            "from_seq": snapshot.seq,
            "to_seq": len(events),
            "broken_at": None,
            "reason": None,
        }

        await store.delete_snapshots(result.run_id)
        again = (await s.client.get(url)).json()
        assert again["chain"] == {**detail["chain"], "scope": "full", "from_seq": 1}
        assert {**again, "chain": None} == {**detail, "chain": None}
