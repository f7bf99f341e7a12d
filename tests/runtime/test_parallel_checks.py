"""The checks around a parallel node's rounds: a selection by fallback (an unusable branch
judge reply, a custom strategy's non-candidate) and an llm_judge verifier's reply with no
score are checks that did not run, counted alike by the fold, the live result, ``show``
and the metric; one answer is taken without asking the branch judge; and a round never
takes a node past its ``max_iterations``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from runtime import (
    EdgeSpec,
    GraphSpec,
    NodeSpec,
    ProviderError,
    Runtime,
    RuntimeMetrics,
    ScriptedProvider,
    tool,
)
from runtime.events import (
    BranchesJudged,
    BranchesSelected,
    BranchFinished,
    BranchTurn,
    LlmTurn,
    Verdict,
    VerificationRecorded,
    fold,
)
from runtime.reads import RunReader
from runtime.spec import (
    BranchCandidate,
    BranchJudgeSpec,
    BranchSpec,
    LlmJudgeVerifier,
    ParallelSpec,
)
from runtime.testing import assert_replays, function_node, reply, tool_call

pytestmark = pytest.mark.anyio

QUESTION = "What is the capital of France? Answer in one word."


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: capital of France"


def answering(text: str) -> ScriptedProvider:
    """A branch model: sets the output, then answers ``text``."""
    return ScriptedProvider([reply("", tool_call("set_output", key="answer", value=text)), text])


def parallel_graph(strategy: str = "llm_judge", *, n: int = 3, **node: Any) -> GraphSpec:
    return GraphSpec(
        id="parallel",
        entry_node="answer",
        terminal_nodes=["answer"],
        nodes=[
            NodeSpec(
                id="answer",
                kind="llm",
                input_keys=["question"],
                output_keys=["answer"],
                parallel=ParallelSpec(
                    branches=[BranchSpec(label=f"b{i}", provider=f"p{i}") for i in range(n)],
                    strategy=strategy,
                    judge=BranchJudgeSpec(provider="judge"),
                ),
                **node,
            )
        ],
    )


class Outcome(msgspec.Struct):
    result: Any
    events: list[Any]
    state: Any  # the fold of the log read back
    shown: Any  # what `magistrate show` reads: the run's detail
    registry: CollectorRegistry

    def failures(self, reason: str) -> float:
        value = self.registry.get_sample_value(
            "magistrate_judge_failures_total", {"reason": reason}
        )
        return 0.0 if value is None else value


async def run(
    tmp_path: Path,
    graph: GraphSpec,
    providers: dict[str, Any],
    *,
    provider: ScriptedProvider | None = None,
    **options: Any,
) -> Outcome:
    registry = CollectorRegistry()
    async with Runtime(
        tmp_path / "runs.db",
        provider=provider or ScriptedProvider([]),
        providers=providers,
        metrics=RuntimeMetrics(registry),
        **options,
    ) as rt:
        result = await (await rt.start(graph, input={"question": QUESTION})).result()
        events = await rt.read_events(result.run_id)
        assert rt.store is not None
        shown = await RunReader(rt.store).detail(result.run_id)
        await assert_replays(rt, result.run_id)  # the replay reads the same
    return Outcome(result, events, fold(events), shown, registry)


def assert_one_failure(outcome: Outcome, kind: str, node_id: str, says: str) -> None:
    """One check that did not run, of ``kind``, agreed on everywhere it is shown."""
    assert outcome.result.status == "completed" and outcome.result.quality == "degraded"
    assert outcome.state.judge_failures == {kind: 1}
    [kept] = outcome.state.judge_failure_reasons
    assert (kept.kind, kept.node_id) == (kind, node_id) and says in kept.reason
    assert outcome.shown.judge_failures is not None
    assert outcome.shown.judge_failures.by_kind == {kind: 1}
    assert outcome.failures(kind) == 1.0


def without_errors(events: Sequence[Any]) -> list[Any]:
    """The log as an older runtime wrote it: no ``error`` on a selection or a result."""
    older = []
    for event in events:
        if isinstance(event.body, BranchesSelected | VerificationRecorded):
            event = msgspec.structs.replace(
                event, body=msgspec.structs.replace(event.body, error=None)
            )
        older.append(event)
    return older


async def test_a_branch_judge_reply_without_a_usable_number_is_a_judge_failure(
    tmp_path: Path,
) -> None:
    branches = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
    judge = ScriptedProvider(["I like them all."], name="judge")
    outcome = await run(tmp_path, parallel_graph(), {**branches, "judge": judge})

    assert outcome.result.memory["answer"] == "Lyon"  # the first answer, by fallback
    selected = next(e.body for e in outcome.events if isinstance(e.body, BranchesSelected))
    judged = next(e.body for e in outcome.events if isinstance(e.body, BranchesJudged))
    assert judged.error is None and selected.winner == 0
    assert selected.error == "no response number in 'I like them all.'"
    assert selected.reason == f"judge fallback to the first answer: {selected.error}"
    assert_one_failure(outcome, "branch_judge", "answer", "no response number")
    # A log written before the selection recorded it folds as it did: nothing counted.
    assert fold(without_errors(outcome.events)).judge_failures == {}


async def test_a_custom_strategy_that_names_no_candidate_is_a_judge_failure(
    tmp_path: Path,
) -> None:
    class Stray:
        def select(self, candidates: Sequence[BranchCandidate], query: str) -> int:
            return 99

    branches = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
    outcome = await run(
        tmp_path, parallel_graph("stray"), branches, branch_strategies={"stray": Stray()}
    )

    assert outcome.result.memory["answer"] == "Lyon"
    selected = next(e.body for e in outcome.events if isinstance(e.body, BranchesSelected))
    assert selected.error == "stray returned 99, not a candidate"
    assert selected.reason == "stray returned 99, not a candidate: the first answer"
    assert_one_failure(outcome, "branch_judge", "answer", "not a candidate")


async def test_a_strategy_that_chooses_is_no_judge_failure(tmp_path: Path) -> None:
    branches = {f"p{i}": answering(t) for i, t in enumerate(["Lyon", "Paris", "Nice"])}
    judge = ScriptedProvider(["Response 2"], name="judge")
    outcome = await run(tmp_path, parallel_graph(), {**branches, "judge": judge})
    assert (outcome.result.quality, outcome.result.memory["answer"]) == ("clean", "Paris")
    selected = next(e.body for e in outcome.events if isinstance(e.body, BranchesSelected))
    assert selected.error is None and outcome.state.judge_failures == {}
    assert outcome.failures("branch_judge") == 0.0
    # The verifier's reason is there from the first scrape, at 0.
    labels = {"reason": "verify"}
    assert outcome.registry.get_sample_value("magistrate_judge_failures_total", labels) == 0.0


def verifier_graph() -> GraphSpec:
    return GraphSpec(
        id="checked",
        entry_node="write",
        terminal_nodes=["check"],
        nodes=[
            function_node("write", output_keys=["draft"]),
            NodeSpec(
                id="check",
                kind="verifier",
                input_keys=["draft"],
                output_keys=["check_verification", "check_verification_passed"],
                verifier=LlmJudgeVerifier(
                    target_key="draft", evaluation_criteria="Clear.", evaluator="critic"
                ),
            ),
        ],
        edges=[EdgeSpec(source="write", target="check")],
    )


async def test_an_evaluator_reply_with_no_score_is_a_judge_failure(tmp_path: Path) -> None:
    critic = ScriptedProvider(["It reads well, I suppose."], name="critic")
    outcome = await run(
        tmp_path,
        verifier_graph(),
        {"critic": critic},
        functions={"write": lambda inputs: {"draft": "The kettle boils."}},
    )

    assert outcome.result.memory["check_verification_passed"] is False  # as before
    [recorded] = [e.body for e in outcome.events if isinstance(e.body, VerificationRecorded)]
    assert recorded.error is not None and "no score from 0 to 1" in recorded.error
    assert recorded.result["reasoning"] == recorded.error
    assert_one_failure(outcome, "verify", "check", "no score from 0 to 1")
    assert fold(without_errors(outcome.events)).judge_failures == {}


async def test_one_answering_branch_is_taken_without_asking_the_judge(tmp_path: Path) -> None:
    down: list[Any] = [ProviderError("p", "down")]
    branches: dict[str, Any] = {
        "p0": ScriptedProvider(down),
        "p1": answering("Paris"),
        "p2": ScriptedProvider(down),
    }
    judge = ScriptedProvider(["1"], name="judge")
    outcome = await run(tmp_path, parallel_graph(), {**branches, "judge": judge})

    assert judge.calls == 0
    assert not any(isinstance(e.body, BranchesJudged) for e in outcome.events)
    selected = next(e.body for e in outcome.events if isinstance(e.body, BranchesSelected))
    assert (selected.strategy, selected.winner, selected.candidates) == ("llm_judge", 1, [1])
    assert selected.reason == "the only answer: the judge is not asked"
    assert selected.error is None
    assert (outcome.result.quality, outcome.result.memory["answer"]) == ("clean", "Paris")


def three_turns(text: str) -> ScriptedProvider:
    """A branch model that sets the output, looks the city up, then answers."""
    return ScriptedProvider(
        [
            reply("", tool_call("set_output", key="answer", value=text)),
            reply("", tool_call("lookup", city=text)),
            text,
        ]
    )


def node_turns(events: Sequence[Any]) -> list[int]:
    return [e.body.iteration for e in events if isinstance(e.body, LlmTurn)]


async def test_a_round_never_takes_its_node_past_max_iterations(tmp_path: Path) -> None:
    branches = {f"p{i}": three_turns(t) for i, t in enumerate(["Paris", "Lyon"])}
    outcome = await run(
        tmp_path,
        parallel_graph("first_success", n=2, max_iterations=1),
        branches,
        tools=[lookup],
    )

    assert node_turns(outcome.events) == [1]
    # Each branch had the node's one turn left; it ended with what it had, an answer.
    turns = [e.body for e in outcome.events if isinstance(e.body, BranchTurn)]
    assert sorted(t.iteration for t in turns) == [1, 1]
    finished = [e.body for e in outcome.events if isinstance(e.body, BranchFinished)]
    assert [(f.ok, f.turns, f.error) for f in finished] == [(True, 1, None)] * 2
    # The node's bound rules on the winner's turn as on the node's own last turn.
    last = [e.body for e in outcome.events if isinstance(e.body, Verdict)][-1]
    assert (last.action, last.level) == ("accept", "max_iterations")
    assert outcome.result.status == "completed" and outcome.result.memory["answer"] in (
        "Paris",
        "Lyon",
    )


async def test_a_later_round_has_only_the_node_s_turns_left(tmp_path: Path) -> None:
    branches = {
        f"p{i}": ScriptedProvider(
            [
                reply("", tool_call("set_output", key="answer", value=t)),
                t,
                reply("", tool_call("set_output", key="answer", value=t.upper())),
                t.upper(),
            ]
        )
        for i, t in enumerate(["Paris", "Lyon"])
    }
    model = ScriptedProvider([], judge=['{"verdict": "RETRY", "feedback": "Shout it."}'])
    outcome = await run(
        tmp_path,
        parallel_graph("first_success", n=2, max_iterations=3, success_criteria=["loud"]),
        branches,
        provider=model,
    )

    # Round 1 took two turns; round 2 had one left (not max_turns, 8).
    assert node_turns(outcome.events) == [1, 2, 3]
    rounds = [e.body for e in outcome.events if isinstance(e.body, BranchesSelected)]
    assert [r.round for r in rounds] == [0, 2]
    assert outcome.result.status == "completed"
    assert outcome.result.memory["answer"] in ("PARIS", "LYON")


async def test_an_older_run_that_asked_the_judge_with_one_answer_replays_equal(
    tmp_path: Path,
) -> None:
    """A run recorded when the judge was asked about a lone answer (a branches.judged
    before its selection, which gave its own reason) replays equal: the judge's call
    could not change the winner, and is no decision the replay compares."""
    down: list[Any] = [ProviderError("p", "down")]
    providers: dict[str, Any] = {
        "p0": ScriptedProvider(down),
        "p1": answering("Paris"),
        "p2": ScriptedProvider(down),
        "judge": ScriptedProvider(["1"], name="judge"),
    }
    outcome = await run(tmp_path, parallel_graph(), providers)
    older: list[Any] = []
    for event in outcome.events:
        body = event.body
        if isinstance(body, BranchesSelected):
            older.append(
                BranchesJudged(node_id=body.node_id, visit=body.visit, round=body.round, text="1")
            )
            body = msgspec.structs.replace(body, reason="the judge chose answer 1")
        older.append(body)
    async with Runtime(
        tmp_path / "runs.db", provider=ScriptedProvider([]), providers=providers
    ) as rt:
        assert rt.store is not None
        await rt.store.append("older", older, expected_seq=0)
        report = await rt.replay("older")
    assert report.equal, report.summary()
