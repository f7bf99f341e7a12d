"""A recorded run for the replay tests: an LLM node with a tool and a Level 2 judge, an
expression verifier, a fan-out, a pause gate approved by a person, conditional edges.

``record(path)`` runs it on a SQLite store and returns the run id; ``trip()`` is the
graph, which each test changes one way; ``offline()`` is a runtime whose model, tool and
functions fail on any call, to prove a replay calls none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from runtime import (
    EdgeSpec,
    Goal,
    GraphSpec,
    JudgeContext,
    JudgeVerdict,
    NodeSpec,
    ProviderError,
    Runtime,
    tool,
)
from runtime.llm import ToolRegistry
from runtime.providers import LlmRequest, LlmResponse
from runtime.spec import ExpressionVerifier, LlmJudgeVerifier, SuccessCriterion
from runtime.testing import ScriptedProvider, reply, tool_call


def trip(**changes: Any) -> GraphSpec:
    nodes = [
        NodeSpec(
            id="plan",
            kind="llm",
            tools=["search"],
            output_keys=["summary", "budget"],
            success_criteria=["a concrete plan"],
            max_iterations=8,
        ),
        NodeSpec(
            id="check",
            kind="verifier",
            input_keys=["budget"],
            output_keys=["check_verification", "check_verification_passed"],
            verifier=ExpressionVerifier(expression="budget <= 1000"),
        ),
        NodeSpec(id="hotel", function="hotel", output_keys=["hotel"]),
        NodeSpec(id="flight", function="flight", output_keys=["flight"]),
        NodeSpec(
            id="book", function="book", input_keys=["hotel", "flight"], output_keys=["amount"]
        ),
        NodeSpec(id="review", function="done"),
        NodeSpec(id="done", function="done"),
    ]
    edges = [
        EdgeSpec(source="plan", target="check"),
        EdgeSpec(source="check", target="hotel"),
        EdgeSpec(source="check", target="flight"),
        EdgeSpec(source="hotel", target="book"),
        EdgeSpec(source="flight", target="book"),
        EdgeSpec(
            source="book", target="review", condition="conditional", expression="amount > 100"
        ),
        EdgeSpec(source="book", target="done", condition="conditional", expression="amount <= 100"),
    ]
    graph = GraphSpec(id="trip", nodes=nodes, edges=edges, entry_node="plan", pause_nodes=["book"])
    return msgspec.structs.replace(graph, **changes)


def node(graph: GraphSpec, node_id: str, **changes: Any) -> GraphSpec:
    """``graph`` with node ``node_id`` changed."""
    nodes = [msgspec.structs.replace(n, **changes) if n.id == node_id else n for n in graph.nodes]
    return msgspec.structs.replace(graph, nodes=nodes)


def edge(graph: GraphSpec, target: str, **changes: Any) -> GraphSpec:
    """``graph`` with the edges into ``target`` changed."""
    edges = [
        msgspec.structs.replace(e, **changes) if e.target == target else e for e in graph.edges
    ]
    return msgspec.structs.replace(graph, edges=edges)


def without(graph: GraphSpec, node_id: str) -> GraphSpec:
    """``graph`` without node ``node_id`` and its edges."""
    return msgspec.structs.replace(
        graph,
        nodes=[n for n in graph.nodes if n.id != node_id],
        edges=[e for e in graph.edges if node_id not in (e.source, e.target)],
    )


def script() -> ScriptedProvider:
    return ScriptedProvider(
        [
            reply("", tool_call("search", city="Lisbon")),
            reply("", tool_call("set_output", key="summary", value="three days in Lisbon")),
            reply("", tool_call("set_output", key="budget", value=800)),
            reply("A plan."),
            reply("Day 1: Alfama. Day 2: Belem. Day 3: Sintra."),
        ],
        judge=[
            '{"verdict": "RETRY", "confidence": 0.6, "feedback": "too vague"}',
            '{"verdict": "ACCEPT", "confidence": 0.9}',
        ],
    )


def search(city: str) -> str:
    """Find things to do in a city."""
    return f"{city}: trams, tiles, custard tarts"


def hotel(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"hotel": 60}


def flight(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"flight": 70}


def book(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"amount": inputs["hotel"] + inputs["flight"]}


def done(inputs: dict[str, Any]) -> dict[str, Any]:
    return {}


FUNCTIONS = {"hotel": hotel, "flight": flight, "book": book, "done": done}


async def record(store: Path, graph: GraphSpec | None = None) -> str:
    """Run the trip graph to its end (approved at its gate); return the run id."""
    async with Runtime(store, provider=script(), functions=FUNCTIONS, tools=[tool(search)]) as rt:
        handle = await rt.start(graph or trip(), input={"city": "Lisbon"})
        paused = await handle.result()
        assert paused.status == "paused", paused
        approved = await rt.approve(handle.run_id, by="ann")
        assert approved is not None
        result = await approved.result()
        assert result.status == "completed", result
        return handle.run_id


class Failing:
    """A provider that fails on any call."""

    name = "failing"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        raise ProviderError("failing", "a replay must not call the model")


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a replay must not call a tool or a function")


def refusing_search(city: str) -> str:
    """Find things to do in a city."""
    return _refuse()  # type: ignore[no-any-return]


def offline(store: Path, provider: Failing) -> Runtime:
    """A runtime on ``store`` whose model, tool and functions all refuse to run."""
    return Runtime(
        store,
        provider=provider,
        functions={name: _refuse for name in FUNCTIONS},
        tools=ToolRegistry([tool(name="search")(refusing_search)]),
    )


def routed(**changes: Any) -> GraphSpec:
    """An LLM node whose next node an llm_decide edge picks, an llm_judge verifier, a
    custom judge, and a goal scored by an evaluator model and an expression."""
    nodes = [
        NodeSpec(id="write", kind="llm", output_keys=["draft"], judge="strict"),
        NodeSpec(id="short", function="done", description="a short reply"),
        NodeSpec(id="long", function="done", description="a long reply"),
        NodeSpec(
            id="grade",
            kind="verifier",
            output_keys=["grade_verification", "grade_verification_passed"],
            verifier=LlmJudgeVerifier(target_key="draft", evaluation_criteria="polite"),
        ),
    ]
    edges = [
        EdgeSpec(source="write", target="short", condition="llm_decide", fallback="short"),
        EdgeSpec(source="write", target="long", condition="llm_decide", fallback="short"),
        EdgeSpec(source="short", target="grade"),
        EdgeSpec(source="long", target="grade"),
    ]
    goal = Goal(
        description="a polite reply",
        success_criteria=[
            SuccessCriterion(id="polite", description="the reply is polite"),
            SuccessCriterion(id="drafted", description="a draft", expression="draft != ''"),
        ],
        evaluator="grader",
    )
    graph = GraphSpec(id="routed", nodes=nodes, edges=edges, entry_node="write", goal=goal)
    return msgspec.structs.replace(graph, **changes)


class Strict:
    """A custom judge: accepts once the draft is set."""

    def __init__(self) -> None:
        self.calls = 0

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        self.calls += 1
        if context.accumulator.get("draft"):
            return JudgeVerdict(action="accept", level="custom")
        return JudgeVerdict(action="retry", level="custom", feedback="set the draft")


async def record_routed(store: Path) -> str:
    model = ScriptedProvider(
        [
            reply("Dear Ann"),
            reply("", tool_call("set_output", key="draft", value="Dear Ann, thanks.")),
            '{"score": 0.9, "reasoning": "courteous"}',
        ],
        router=['{"target": "long", "reasoning": "needs detail"}'],
    )
    grader = ScriptedProvider(['{"score": 0.85, "reasoning": "polite enough"}'], name="grader")
    async with Runtime(
        store,
        provider=model,
        providers={"grader": grader},
        functions=FUNCTIONS,
        judges={"strict": Strict()},
    ) as rt:
        result = await (await rt.start(routed(), input={"to": "Ann"})).result()
        assert result.status == "completed", result
        assert result.goal_outcome is not None and result.goal_outcome.met, result
        assert result.memory["grade_verification_passed"] is True, result
        return result.run_id
