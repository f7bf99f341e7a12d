"""Replaying a recorded run against today's graph: an unchanged graph replays equal with
no model, tool or function called; each kind of change is reported at the recorded seq
where today's graph decides otherwise, with the reason."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from runtime import Runtime
from runtime.events import ApprovalGranted, EdgeTaken, NodeStarted, Verdict, VerificationRecorded
from runtime.spec import ExpressionVerifier, LlmJudgeVerifier, SuccessCriterion
from runtime.testing import ScriptedProvider, assert_replays

from .replay_graphs import (
    Failing,
    Strict,
    edge,
    node,
    offline,
    record,
    record_routed,
    routed,
    trip,
    without,
)

pytestmark = pytest.mark.anyio


async def _seqs(store: Path, run_id: str) -> list[tuple[int, object]]:
    async with Runtime(store) as rt:
        return [(e.seq, e.body) for e in await rt.read_events(run_id)]


async def test_the_same_graph_replays_equal_without_calling_anything(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    provider = Failing()
    async with offline(store, provider) as rt:
        report = await rt.replay(run_id)
        again = await rt.replay(run_id, trip())
    assert report.equal, report.summary()
    assert report.divergences == [] and report.stopped is None and report.warnings == []
    assert again.equal, again.summary()
    assert provider.calls == 0
    # Every answer came from the log: 5 turns and 2 Level 2 answers.
    assert report.model_calls == 7
    assert report.recorded_events == report.replayed_events or report.replayed_events > 0


async def test_a_removed_success_criterion_accepts_where_the_judge_retried(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    level2 = [seq for seq, body in events if isinstance(body, Verdict) and body.level == "quality"]
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id, node(trip(), "plan", success_criteria=[]))
    assert not report.equal
    first = report.divergences[0]
    assert first.seq == level2[0] and first.kind == "judge.verdict"
    assert first.reason.startswith("verdict ACCEPT at level 0")
    assert first.reason.endswith("where RETRY was recorded")


async def test_a_new_output_key_retries_at_level_0(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    level2 = [seq for seq, body in events if isinstance(body, Verdict) and body.level == "quality"]
    graph = node(trip(), "plan", output_keys=["summary", "budget", "currency"])
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id, graph)
    first = report.divergences[0]
    assert first.seq == level2[0]
    assert "verdict RETRY at level 0: Missing required output keys: currency" in first.reason
    assert report.warnings and "output keys changed" in report.warnings[0]


async def test_a_changed_edge_expression_is_now_false(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    [taken] = [s for s, b in events if isinstance(b, EdgeTaken) and b.target == "review"]
    graph = edge(trip(), "review", expression="amount > 200")
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id, graph)
    first = report.divergences[0]
    assert (first.seq, first.kind) == (taken, "edge.taken")
    assert "edge `amount > 100`" in first.reason and "now false" in first.reason


async def test_a_removed_node_is_no_longer_in_the_graph(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    [started] = [s for s, b in events if isinstance(b, NodeStarted) and b.node_id == "review"]
    graph = without(trip(), "review")
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id, graph)
    reasons = {d.seq: d.reason for d in report.divergences}
    assert reasons[started] == "node `review` is no longer in the graph"


async def test_a_changed_verifier_now_fails(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    [verified] = [s for s, b in events if isinstance(b, VerificationRecorded)]
    graph = node(trip(), "check", verifier=ExpressionVerifier(expression="budget <= 500"))
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id, graph)
    first = report.divergences[0]
    assert (first.seq, first.kind) == (verified, "verifier.result")
    assert first.reason.startswith("verifier `check` now fails")


async def test_assert_replays_raises_with_the_report(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    async with offline(store, Failing()) as rt:
        report = await assert_replays(rt, run_id, trip())
        assert report.equal
        with pytest.raises(AssertionError, match="node `review` is no longer in the graph"):
            await assert_replays(rt, run_id, without(trip(), "review"))


async def test_routes_verifier_evaluations_goals_and_custom_judges_replay_equal(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    run_id = await record_routed(store)
    strict = Strict()
    provider = Failing()
    async with Runtime(
        store, provider=provider, providers={"grader": provider}, judges={"strict": strict}
    ) as rt:
        report = await rt.replay(run_id)
    assert report.equal, report.summary()
    # Two turns, the route, the verifier's evaluation and the goal's: all from the log.
    assert report.model_calls == 5 and provider.calls == 0
    assert strict.calls == 2 and report.not_redecided == []  # registered: decided again


async def test_a_judge_that_may_not_be_imported_gives_its_recorded_verdicts(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    run_id = await record_routed(store)
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id)
    assert report.equal, report.summary()
    [note] = report.not_redecided
    assert note.startswith("the verdicts of node `write`'s judge:") and "strict" in note


async def test_an_llm_decide_target_removed_and_a_stricter_verifier_and_goal(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    run_id = await record_routed(store)
    events = await _seqs(store, run_id)
    [routed_at] = [s for s, b in events if isinstance(b, EdgeTaken) and b.source == "write"]
    [graded] = [s for s, b in events if isinstance(b, VerificationRecorded)]
    strict = {"strict": Strict()}
    async with Runtime(store, judges=strict) as rt:
        removed = await rt.replay(run_id, without(routed(), "long"))
        verifier = LlmJudgeVerifier(
            target_key="draft", evaluation_criteria="polite", pass_threshold=0.95
        )
        stricter = await rt.replay(run_id, node(routed(), "grade", verifier=verifier))
        goal = routed().goal
        assert goal is not None
        criteria = [SuccessCriterion(id="polite", description="polite", threshold=0.95)]
        scored = await rt.replay(
            run_id, routed(goal=msgspec.structs.replace(goal, success_criteria=criteria))
        )
    first = removed.divergences[0]
    assert (first.seq, first.kind) == (routed_at, "edge.taken")
    assert first.reason == "node `long` is no longer in the graph; now edge llm_decide to `short`"
    first = stricter.divergences[0]
    assert (first.seq, first.kind) == (graded, "verifier.result")
    assert first.reason.startswith("verifier `grade` now fails")
    [end] = scored.divergences
    assert (end.seq, end.kind) == (events[-1][0], "run.finished")
    assert end.reason.startswith("goal criterion `polite` now not met")


async def test_rejudge_asks_the_judges_again_once_per_recorded_judged_turn(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    level2 = [seq for seq, body in events if isinstance(body, Verdict) and body.level == "quality"]
    # Today's judge retries the first answer as the recorded one did, then the second too,
    # which the recorded judge accepted: the node would ask its model for a sixth turn.
    judge = ScriptedProvider(
        [],
        judge=[
            '{"verdict": "RETRY", "confidence": 0.6, "feedback": "too vague"}',
            '{"verdict": "RETRY", "confidence": 0.9, "feedback": "no prices"}',
        ],
    )
    async with Runtime(store, provider=judge) as rt:
        report = await rt.replay(run_id, rejudge=True)
    assert judge.calls_for("judge") == len(level2) == 2
    assert report.live_calls == 2 and report.model_calls == 5  # the turns, from the log
    assert any("cost tokens" in w for w in report.warnings)
    first = report.divergences[0]
    assert first.seq == level2[1]
    assert first.reason == "verdict RETRY at level 2 where ACCEPT was recorded: no prices"
    assert report.stopped == "no recorded model answer for node `plan` visit 1 turn 6"


async def test_rejudge_asks_an_llm_judge_verifier_again(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    run_id = await record_routed(store)
    events = await _seqs(store, run_id)
    [graded] = [s for s, b in events if isinstance(b, VerificationRecorded)]
    today = ScriptedProvider(['{"score": 0.3, "reasoning": "curt"}'])
    async with Runtime(store, provider=today, judges={"strict": Strict()}) as rt:
        report = await rt.replay(run_id, rejudge=True)
    assert today.calls_for("verify") == 1 and report.live_calls == 1
    first = report.divergences[0]
    assert (first.seq, first.reason) == (graded, "verifier `grade` now fails: curt")


async def test_a_gate_that_now_needs_a_key_the_recorded_approval_lacks_stops_the_replay(
    tmp_path: Path,
) -> None:
    """The recorded approval is made again at the gate; today's gated node reads a key it
    did not carry, so today's gate stays closed: the replay stops there and says why
    (before, the replay raised the approval's RunStateError, "run R is paused", about a
    run that had completed)."""
    store = tmp_path / "runs.db"
    run_id = await record(store)
    events = await _seqs(store, run_id)
    [approved] = [seq for seq, body in events if isinstance(body, ApprovalGranted)]
    graph = node(trip(), "book", input_keys=["hotel", "flight", "po_number"])
    async with offline(store, Failing()) as rt:
        report = await rt.replay(run_id, graph)
    assert not report.equal and report.divergences == [], report.summary()
    assert report.stopped == (
        f"the approve recorded at seq {approved} is refused now: the gate 'book' stays "
        "closed: its node needs po_number, which neither memory nor the approval's input holds"
    )
