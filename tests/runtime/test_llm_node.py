"""The LLM event-loop node through the real Runtime, a real SQLite log and a scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime._errors import ProviderError, SpecErrors
from runtime._result import RunResult
from runtime._runtime import Runtime
from runtime.events import (
    ConversationCompacted,
    EdgeTaken,
    LlmTurn,
    MessageAdded,
    NodeFailed,
    NodeStarted,
    OutputSet,
    StallDetected,
    ToolResult,
    Verdict,
)
from runtime.llm._prompt import SUMMARY_PREFIX, to_chat_messages
from runtime.llm._tools import tool
from runtime.llm._verdict import JudgeContext, JudgeVerdict
from runtime.providers._base import LlmRequest, ToolCall
from runtime.providers._scripted import ScriptedProvider, reply
from runtime.spec._model import EdgeSpec, Goal, GraphSpec, NodeSpec, RetryPolicy

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.002, jitter=0.0)


def llm(id: str, **kw: Any) -> NodeSpec:
    return NodeSpec(id=id, kind="llm", **kw)


def fn(id: str, **kw: Any) -> NodeSpec:
    return NodeSpec(id=id, kind="function", function=kw.pop("function", id), **kw)


def edge(source: str, target: str, condition: str = "on_success") -> EdgeSpec:
    return EdgeSpec(source=source, target=target, condition=condition)  # type: ignore[arg-type]


def graph(nodes: list[NodeSpec], edges: list[EdgeSpec] | None = None, **kw: Any) -> GraphSpec:
    kw.setdefault("entry_node", nodes[0].id)
    kw.setdefault("retry", FAST)
    return GraphSpec(id="g", nodes=nodes, edges=edges or [], **kw)


_ids = iter(range(1, 1_000_000))


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"t{next(_ids)}", name=name, arguments=arguments)


def set_output(key: str, value: Any) -> ToolCall:
    return call("set_output", key=key, value=value)


async def run_graph(
    tmp_path: Path, g: GraphSpec, provider: ScriptedProvider, **runtime: Any
) -> tuple[RunResult, list[Any]]:
    input = runtime.pop("input", None)
    async with Runtime(tmp_path / "run.db", provider=provider, **runtime) as rt:
        handle = await rt.start(g, input=input)
        result = await handle.result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
        assert rt.store is not None
        assert (await rt.store.verify(handle.run_id)).ok
    return result, events


def of(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def texts(request: LlmRequest) -> list[str]:
    return [m.content for m in request.messages]


def noop(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"handled": True}


TRAVEL = llm(
    "travel",
    description="Plan the trip.",
    output_keys=["flight_options", "hotel_recommendations", "budget_estimate"],
    success_criteria=[
        "Provide specific flight numbers, hotel names with ratings, and itemized budget."
    ],
)


async def test_travel_agent_level0_then_level2_retry_then_accept(tmp_path: Path) -> None:
    vague = "Outputs lack specificity. Flight options should include carrier and flight numbers."
    provider = ScriptedProvider(
        [
            reply(
                "",
                set_output("flight_options", "3 direct flights found"),
                set_output("hotel_recommendations", "5 hotels near venue"),
            ),
            reply("Done."),  # Level 0: budget_estimate missing
            reply(
                "",
                set_output("flight_options", "some flights exist"),
                set_output("hotel_recommendations", "hotels available"),
                set_output("budget_estimate", "around $1000"),
            ),
            reply("Done."),  # Level 2: vague
            reply(
                "",
                set_output("flight_options", "TP 1234 LIS-JFK 09:05"),
                set_output("hotel_recommendations", "Hotel Avenida (4.5/5)"),
                set_output("budget_estimate", {"flights": 820, "hotel": 600}),
            ),
            reply("Done."),
        ],
        judge=[
            f'{{"verdict": "RETRY", "confidence": 0.8, "feedback": "{vague}"}}',
            '{"verdict": "ACCEPT", "confidence": 0.95, "feedback": ""}',
        ],
    )
    result, events = await run_graph(tmp_path, graph([TRAVEL]), provider)
    assert result.status == "completed"
    assert result.memory == {
        "flight_options": "TP 1234 LIS-JFK 09:05",
        "hotel_recommendations": "Hotel Avenida (4.5/5)",
        "budget_estimate": {"flights": 820, "hotel": 600},
    }
    verdicts = of(events, Verdict)
    assert [(v.iteration, v.action, v.level) for v in verdicts] == [
        (1, "retry", "bail_out"),
        (2, "retry", "structural"),
        (3, "retry", "bail_out"),
        (4, "retry", "quality"),
        (5, "retry", "bail_out"),
        (6, "accept", "quality"),
    ]
    assert "budget_estimate" in verdicts[1].feedback
    assert verdicts[3].confidence == 0.8
    turns = provider.requests_for("turn")
    assert len(turns) == 6
    assert f"[Judge feedback]: {verdicts[1].feedback}" in texts(turns[2])
    assert f"[Judge feedback]: {vague}" in texts(turns[4])
    feedback = [m for m in of(events, MessageAdded) if m.kind == "feedback"]
    assert [m.content for m in feedback] == [
        f"[Judge feedback]: {verdicts[1].feedback}",
        f"[Judge feedback]: {vague}",
    ]
    # The quality judge saw the outputs of the turn it judged.
    assert "around $1000" in provider.requests_for("judge")[0].messages[0].content
    # set_output is offered with the output keys as an enum.
    offered = {t.name: t for t in turns[0].tools}
    assert offered["set_output"].parameters["properties"]["key"]["enum"] == TRAVEL.output_keys


async def test_set_output_fills_every_key_then_text_accepts_into_memory(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a", "b", "maybe"], nullable_keys=["maybe"])
    provider = ScriptedProvider(
        [
            reply(
                "",
                set_output("a", 1),
                set_output("b", ["x", "y"]),
                set_output("maybe", None),
            ),
            reply("All outputs are set."),
        ]
    )
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "completed"
    assert result.memory == {"a": 1, "b": ["x", "y"], "maybe": None}
    assert [(o.key, o.value) for o in of(events, OutputSet)] == [
        ("a", 1),
        ("b", ["x", "y"]),
        ("maybe", None),
    ]
    assert [v.action for v in of(events, Verdict)] == ["retry", "accept"]
    assert provider.calls == 2


async def test_set_output_with_an_unknown_key_is_an_error_result(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"])
    bad = set_output("nope", 1)
    provider = ScriptedProvider([reply("", bad), reply("", set_output("a", 2)), reply("ok")])
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.memory == {"a": 2}
    first = of(events, ToolResult)[0]
    assert (first.call_id, first.is_error) == (bad.id, True)
    assert "not an output key" in first.content


async def test_tool_calls_run_and_their_results_go_back_to_the_model(tmp_path: Path) -> None:
    seen: list[str] = []

    @tool
    def search(query: str) -> dict[str, Any]:
        """Search flights."""
        seen.append(query)
        return {"query": query, "hits": 2}

    @tool
    async def weather(city: str) -> str:
        """Weather for a city."""
        seen.append(city)
        return f"sunny in {city}"

    node = llm("n", tools=["search", "weather"], output_keys=["answer"])
    first, second = call("search", query="LIS"), call("weather", city="Lisbon")
    provider = ScriptedProvider(
        [reply("Looking.", first, second), reply("", set_output("answer", "go")), reply("ok")]
    )
    result, events = await run_graph(tmp_path, graph([node]), provider, tools=[search, weather])
    assert result.memory == {"answer": "go"}
    assert sorted(seen) == ["LIS", "Lisbon"]
    offered = [t.name for t in provider.requests[0].tools]
    assert offered == ["search", "weather", "set_output"]
    tool_messages = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_messages] == [
        (first.id, '{"query":"LIS","hits":2}'),
        (second.id, "sunny in Lisbon"),
    ]
    assistant = [m for m in provider.requests[1].messages if m.role == "assistant"]
    assert assistant[0].tool_calls == [first, second]
    # Record before act: the turn is in the log before its results.
    order = [type(e).__name__ for e in events if isinstance(e, LlmTurn | ToolResult)]
    assert order[:3] == ["LlmTurn", "ToolResult", "ToolResult"]


async def test_a_tool_that_raises_becomes_an_error_result_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    @tool
    def flaky(x: int) -> int:
        """Always fails."""
        raise ValueError(f"bad x {x}")

    node = llm("n", tools=["flaky"], output_keys=["answer"])
    failing = call("flaky", x=3)
    unknown = call("not_a_tool")
    provider = ScriptedProvider(
        [reply("", failing, unknown), reply("", set_output("answer", 42)), reply("done")]
    )
    result, events = await run_graph(tmp_path, graph([node]), provider, tools=[flaky])
    assert result.status == "completed"
    assert result.memory == {"answer": 42}
    results = {r.call_id: r for r in of(events, ToolResult)}
    assert results[failing.id].is_error
    assert results[failing.id].content == "ValueError: bad x 3"
    assert results[unknown.id].is_error
    assert "UnknownToolError" in results[unknown.id].content
    assert "ValueError: bad x 3" in texts(provider.requests[1])


class Escalating:
    async def evaluate(self, context: JudgeContext) -> str:
        return "escalate"


async def test_escalate_fails_the_node_and_takes_the_on_failure_edge(tmp_path: Path) -> None:
    g = graph(
        [llm("n", output_keys=["a"], judge="esc"), fn("fallback"), fn("next")],
        [edge("n", "next"), edge("n", "fallback", "on_failure")],
        terminal_nodes=["fallback", "next"],
    )
    provider = ScriptedProvider([reply("I cannot do this.")])
    result, events = await run_graph(
        tmp_path,
        g,
        provider,
        judges={"esc": Escalating()},
        functions={"fallback": noop, "next": noop},
    )
    assert result.status == "completed"
    assert result.quality == "degraded"
    assert result.path == ["n", "fallback"]
    failed = of(events, NodeFailed)
    assert [(f.node_id, f.error_type, f.will_retry) for f in failed] == [("n", "Escalated", False)]
    assert [(v.action, v.level) for v in of(events, Verdict)] == [("escalate", "custom")]
    assert [(e.source, e.target, e.condition) for e in of(events, EdgeTaken)] == [
        ("n", "fallback", "on_failure")
    ]


async def test_provider_error_fails_the_node_once_and_takes_on_failure(tmp_path: Path) -> None:
    g = graph(
        [llm("n", output_keys=["a"], retry=RetryPolicy(max_attempts=3)), fn("fallback")],
        [edge("n", "fallback", "on_failure")],
        terminal_nodes=["fallback"],
    )
    provider = ScriptedProvider([ProviderError("scripted", "HTTP 503 after retries")])
    result, events = await run_graph(tmp_path, g, provider, functions={"fallback": noop})
    assert result.path == ["n", "fallback"]
    assert result.memory == {"handled": True}
    assert provider.calls == 1
    # LLM nodes are never retried by the executor, whatever their retry policy says.
    assert [s.node_id for s in of(events, NodeStarted)] == ["n", "fallback"]
    failed = of(events, NodeFailed)
    assert [(f.error_type, f.will_retry, f.attempt) for f in failed] == [
        ("ProviderError", False, 1)
    ]
    assert "HTTP 503 after retries" in failed[0].error
    assert result.total_retries == 0


async def test_an_escalating_llm_node_with_a_retry_policy_starts_exactly_once(
    tmp_path: Path,
) -> None:
    g = graph([llm("n", output_keys=["a"], max_iterations=2, retry=RetryPolicy(max_attempts=3))])
    provider = ScriptedProvider([reply("no"), reply("still no")])
    result, events = await run_graph(tmp_path, g, provider)
    assert result.status == "failed"
    assert len(of(events, NodeStarted)) == 1
    assert [(f.error_type, f.will_retry) for f in of(events, NodeFailed)] == [("Escalated", False)]
    assert provider.calls == 2


class CountingJudge:
    """Accepts once ``answer`` equals "good"; otherwise asks for it."""

    def __init__(self) -> None:
        self.contexts: list[JudgeContext] = []

    async def evaluate(self, context: JudgeContext) -> JudgeVerdict:
        self.contexts.append(context)
        if context.accumulator.get("answer") == "good":
            return JudgeVerdict(action="accept", level="custom", confidence=1.0)
        return JudgeVerdict(action="retry", level="custom", feedback="Set answer to good.")


async def test_a_registered_custom_judge_decides(tmp_path: Path) -> None:
    judge = CountingJudge()
    node = llm("n", output_keys=["answer"], judge="mine")
    provider = ScriptedProvider(
        [reply("", set_output("answer", "meh")), reply("", set_output("answer", "good"))]
    )
    result, events = await run_graph(tmp_path, graph([node]), provider, judges={"mine": judge})
    assert result.memory == {"answer": "good"}
    assert [(v.action, v.level) for v in of(events, Verdict)] == [
        ("retry", "custom"),
        ("accept", "custom"),
    ]
    assert [c.iteration for c in judge.contexts] == [1, 2]
    assert judge.contexts[0].turn_had_tool_calls
    assert "[Judge feedback]: Set answer to good." in texts(provider.requests[1])


async def escalate_always(context: JudgeContext) -> str:
    return "escalate"


@pytest.mark.parametrize("attribute", ["Escalating", "escalate_always"])
async def test_a_custom_judge_by_import_path(tmp_path: Path, attribute: str) -> None:
    node = llm("n", output_keys=["a"], judge=f"{__name__}:{attribute}")
    result, events = await run_graph(
        tmp_path, graph([node]), ScriptedProvider([reply("x")]), allow_imports=["tests.runtime"]
    )
    assert result.status == "failed"
    assert [(v.action, v.level) for v in of(events, Verdict)] == [("escalate", "custom")]


async def test_an_unknown_judge_is_refused_when_the_run_starts(tmp_path: Path) -> None:
    # The judge of the second node is found missing before the first one runs.
    first = fn("first")
    g = graph([first, llm("n", output_keys=["a"], judge="nowhere")], [edge("first", "n")])
    provider = ScriptedProvider([reply("x")])
    runtime = Runtime(tmp_path / "run.db", provider=provider, functions={"first": dict})
    async with runtime as rt:
        with pytest.raises(
            SpecErrors, match=r"nodes\[1\]\.judge: 'nowhere' is neither a registered judge"
        ):
            await rt.start(g)
        assert rt.store is not None and await rt.store.list_runs() == []
    assert provider.calls == 0


async def test_a_judge_import_path_outside_allow_imports_is_refused(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], judge=f"{__name__}:Escalating")
    async with Runtime(tmp_path / "run.db", provider=ScriptedProvider([])) as rt:
        with pytest.raises(SpecErrors, match=r"nodes\[0\]\.judge: .*not allowed"):
            await rt.start(graph([node]))
    # A prefix that only looks like the module's is not enough.
    runtime = Runtime(None, provider=ScriptedProvider([]), allow_imports=["tests.run"])
    async with runtime as rt:
        with pytest.raises(SpecErrors, match="not allowed"):
            await rt.start(graph([node]))


class AlwaysAccept:
    async def evaluate(self, context: JudgeContext) -> str:
        return "accept"


async def test_accept_override_keeps_a_sloppy_judge_from_accepting_missing_keys(
    tmp_path: Path,
) -> None:
    node = llm("n", output_keys=["a", "b"], judge="yes")
    provider = ScriptedProvider(
        [reply("Finished!"), reply("", set_output("a", 1), set_output("b", 2))]
    )
    result, events = await run_graph(
        tmp_path, graph([node]), provider, judges={"yes": AlwaysAccept()}
    )
    assert result.memory == {"a": 1, "b": 2}
    verdicts = of(events, Verdict)
    assert [(v.action, v.level) for v in verdicts] == [("retry", "override"), ("accept", "custom")]
    assert "a, b" in verdicts[0].feedback
    assert f"[Judge feedback]: {verdicts[0].feedback}" in texts(provider.requests[1])


async def test_a_failing_quality_judge_accepts_with_the_error_recorded(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], success_criteria=["be good"])
    down = ProviderError("judge", "rate limited", status=429)
    provider = ScriptedProvider(
        [reply("", set_output("a", "x")), reply("done")], judge=[down, down, down]
    )
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert result.status == "completed"
    assert result.memory == {"a": "x"}
    last = of(events, Verdict)[-1]
    assert (last.action, last.level) == ("accept", "quality")
    assert last.error is not None and "rate limited" in last.error


async def test_stall_warning_at_exactly_the_third_identical_turn(tmp_path: Path) -> None:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return "same answer"

    node = llm("n", tools=["lookup"], output_keys=["a"])
    same = [reply("", ToolCall(id=f"s{i}", name="lookup", arguments={"q": "x"})) for i in range(4)]
    provider = ScriptedProvider([*same, reply("", set_output("a", 1)), reply("done")])
    result, events = await run_graph(tmp_path, graph([node]), provider, tools=[lookup])
    assert result.status == "completed"
    stalls = of(events, StallDetected)
    assert [s.iteration for s in stalls] == [3]
    assert stalls[0].signature == '[["lookup",{"q":"x"}]]'
    warnings = [m for m in of(events, MessageAdded) if m.kind == "stall_warning"]
    assert len(warnings) == 1
    assert warnings[0].content.startswith("[Judge feedback]: You repeated the same tool calls")
    assert [v.level for v in of(events, Verdict)][:4] == [
        "bail_out",
        "bail_out",
        "stall",
        "bail_out",
    ]
    assert warnings[0].content not in texts(provider.requests[2])
    assert warnings[0].content in texts(provider.requests[3])


async def test_a_client_facing_stall_pauses_for_input_and_resume_continues(
    tmp_path: Path,
) -> None:
    @tool
    def ask_calendar(day: str) -> str:
        """Read the calendar."""
        return "busy"

    node = llm("n", tools=["ask_calendar"], output_keys=["slot"], client_facing=True)
    g = graph([node])
    same = [
        reply("", ToolCall(id=f"c{i}", name="ask_calendar", arguments={"day": "mon"}))
        for i in range(3)
    ]
    db = tmp_path / "run.db"
    first = ScriptedProvider(same)
    async with Runtime(db, provider=first, tools=[ask_calendar]) as rt:
        handle = await rt.start(g)
        paused = await handle.result()
        assert (paused.status, paused.paused_reason, paused.resume_at) == ("paused", "input", ["n"])
        await rt.inject_input(handle.run_id, {"preferred_day": "tuesday"})
    assert first.calls == 3
    second = ScriptedProvider([reply("", set_output("slot", "tue 10:00")), reply("Booked.")])
    async with Runtime(db, provider=second, tools=[ask_calendar]) as rt:
        result = await (await rt.resume(handle.run_id)).result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
    assert result.status == "completed"
    assert result.memory == {"preferred_day": "tuesday", "slot": "tue 10:00"}
    assert [s.iteration for s in of(events, StallDetected)] == [3]
    kinds = [m.kind for m in of(events, MessageAdded)]
    assert "stall_warning" not in kinds
    assert kinds.count("input") == 1
    # The model continues its own conversation and sees the user's answer.
    resumed = texts(second.requests[0])
    assert "[User input]\n- preferred_day: tuesday" in resumed
    assert sum(1 for m in second.requests[0].messages if m.role == "assistant") == 3
    assert [t.iteration for t in of(events, LlmTurn)] == [1, 2, 3, 4, 5]
    assert len(of(events, NodeStarted)) == 2


async def test_a_client_facing_conversation_node_waits_for_the_user_after_each_reply(
    tmp_path: Path,
) -> None:
    node = llm("chat", client_facing=True, max_iterations=2)
    db = tmp_path / "run.db"
    first = ScriptedProvider([reply("Hello! Where do you want to go?")])
    async with Runtime(db, provider=first) as rt:
        handle = await rt.start(graph([node]))
        paused = await handle.result()
    assert (paused.status, paused.paused_reason) == ("paused", "input")
    second = ScriptedProvider([reply("Lisbon is lovely in May.")])
    async with Runtime(db, provider=second) as rt:
        result = await (await rt.resume(handle.run_id, input={"message": "Lisbon"})).result()
        events = [e.body for e in await rt.read_events(handle.run_id)]
    assert first.calls == second.calls == 1
    assert chat(second.requests[0])[-2:] == [
        ("assistant", "Hello! Where do you want to go?"),
        ("user", "[User input]\n- message: Lisbon"),
    ]
    # A conversation node never auto-accepts: max_iterations ends it, after the RETRY of
    # its last turn, which it overrules, is recorded.
    assert result.status == "completed"
    assert [(v.iteration, v.action, v.level) for v in of(events, Verdict)] == [
        (1, "retry", "structural"),
        (2, "retry", "structural"),
        (2, "accept", "max_iterations"),
    ]
    assert not [m for m in of(events, MessageAdded) if m.kind == "feedback"]


@pytest.mark.parametrize("limit", [1, 3])
async def test_max_iterations_ends_the_node_at_exactly_that_many_turns(
    tmp_path: Path, limit: int
) -> None:
    node = llm("n", output_keys=["a"], max_iterations=limit)
    provider = ScriptedProvider([reply(f"turn {i}") for i in range(10)])
    result, events = await run_graph(tmp_path, graph([node]), provider)
    assert provider.calls == limit
    assert result.status == "failed"
    last = of(events, Verdict)[-1]
    assert (last.action, last.level, last.iteration) == ("escalate", "max_iterations", limit)


async def test_max_iterations_accepts_when_the_outputs_are_complete(tmp_path: Path) -> None:
    node = llm("n", output_keys=["a"], max_iterations=2, judge="never")

    class Never:
        async def evaluate(self, context: JudgeContext) -> str:
            return "retry"

    provider = ScriptedProvider([reply("", set_output("a", 1)), reply("more?"), reply("x")])
    result, events = await run_graph(tmp_path, graph([node]), provider, judges={"never": Never()})
    assert provider.calls == 2
    assert result.status == "completed"
    assert result.memory == {"a": 1}
    assert (of(events, Verdict)[-1].action, of(events, Verdict)[-1].level) == (
        "accept",
        "max_iterations",
    )


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=st.integers(min_value=1, max_value=6), tool_turns=st.booleans())
async def test_no_node_exceeds_max_iterations(limit: int, tool_turns: bool) -> None:
    def forever(request: LlmRequest) -> Any:
        return (
            reply(
                "",
                ToolCall(
                    id=f"k{len(request.messages)}",
                    name="set_output",
                    arguments={"key": "a", "value": None},
                ),
            )
            if tool_turns
            else "hm"
        )

    provider = ScriptedProvider(forever)
    node = llm("n", output_keys=["a"], max_iterations=limit)
    async with Runtime(None, provider=provider) as rt:
        result = await (await rt.start(graph([node]))).result()
    assert provider.calls == limit
    assert result.status == "failed"


async def test_judge_every_n_turns_judges_tool_turns_every_nth_and_text_turns_always(
    tmp_path: Path,
) -> None:
    judge = CountingJudge()
    node = llm("n", output_keys=["answer"], judge="mine", judge_every_n_turns=2)
    provider = ScriptedProvider(
        [
            reply("", set_output("answer", "meh")),
            reply("", set_output("answer", "meh")),
            reply("", set_output("answer", "still meh")),
            reply("thinking"),
            reply("", set_output("answer", "good")),
            reply("", set_output("answer", "good")),
        ]
    )
    result, events = await run_graph(tmp_path, graph([node]), provider, judges={"mine": judge})
    assert result.memory == {"answer": "good"}
    assert [c.iteration for c in judge.contexts] == [2, 4, 6]
    # A tool turn the judge is not asked about is recorded as its bail-out.
    assert [(v.iteration, v.level) for v in of(events, Verdict)] == [
        (1, "bail_out"),
        (2, "custom"),
        (3, "bail_out"),
        (4, "custom"),
        (5, "bail_out"),
        (6, "custom"),
    ]
    assert provider.calls == 6


def chat(request: LlmRequest) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages]


async def test_continuous_conversation_threads_nodes_with_a_transition_marker(
    tmp_path: Path,
) -> None:
    g = graph(
        [
            llm(
                "research",
                description="Find facts.",
                output_keys=["facts"],
                system_prompt="Search widely.",
            ),
            llm(
                "write",
                description="Write the report.",
                output_keys=["report"],
                input_keys=["facts"],
            ),
        ],
        [edge("research", "write")],
        identity="You are Ada, a careful analyst.",
        narrative="The client is a travel agency.",
        goal=Goal(description="Produce a trip report", success_criteria=["Accurate"]),
    )
    provider = ScriptedProvider(
        [
            reply("Researching.", set_output("facts", "Lisbon is sunny")),
            reply("Research done."),
            reply("", set_output("report", "Go to Lisbon")),
            reply("Report written."),
        ]
    )
    result, events = await run_graph(tmp_path, g, provider, input={"topic": "Lisbon"})
    assert result.path == ["research", "write"]
    first, _, third, _ = provider.requests
    system = third.system
    assert system.index("You are Ada") < system.index("Produce a trip report")
    assert system.index("travel agency") < system.index("Write the report.")
    assert "Search widely." in first.system and "Search widely." not in system
    assert "report" in system and "set_output" in system
    messages = texts(third)
    assert "Research done." in messages
    assert "Researching." in messages
    transitions = [m for m in of(events, MessageAdded) if m.kind == "transition"]
    assert len(transitions) == 1
    assert transitions[0].node_id == "write"
    marker = transitions[0].content
    assert '"research" is complete' in marker and "facts: Lisbon is sunny" in marker
    assert 'Next phase: "write" - Write the report.' in marker
    assert marker in messages
    assert messages.index("Research done.") < messages.index(marker)
    assert "[Inputs]\n- topic: Lisbon" in texts(first)
    assert "[Inputs]\n- facts: Lisbon is sunny" in messages


async def test_isolated_conversation_starts_each_node_fresh(tmp_path: Path) -> None:
    g = graph(
        [llm("a", output_keys=["x"]), llm("b", output_keys=["y"], input_keys=["x"])],
        [edge("a", "b")],
        conversation_mode="isolated",
    )
    provider = ScriptedProvider(
        [
            reply("secret of a", set_output("x", 1)),
            reply("a done"),
            reply("", set_output("y", 2)),
            reply("b done"),
        ]
    )
    result, events = await run_graph(tmp_path, g, provider)
    assert result.memory == {"x": 1, "y": 2}
    b_first = provider.requests[2]
    assert chat(b_first) == [("user", "[Inputs]\n- x: 1")]
    assert all("secret of a" not in m.content for r in provider.requests[2:] for m in r.messages)
    assert not [m for m in of(events, MessageAdded) if m.kind == "transition"]


async def test_older_turns_are_compacted_when_over_the_context_budget(tmp_path: Path) -> None:
    @tool
    def read(page: int) -> str:
        """Read a page."""
        return f"page {page}: " + "lorem ipsum " * 20

    node = llm("n", tools=["read"], output_keys=["a"])
    script: list[Any] = [reply(f"reading {i}", call("read", page=i)) for i in range(6)]
    script += [reply("", set_output("a", "done")), reply("finished")]
    provider = ScriptedProvider(script)
    result, events = await run_graph(
        tmp_path, graph([node]), provider, tools=[read], context_budget_tokens=200
    )
    assert result.memory == {"a": "done"}
    compactions = of(events, ConversationCompacted)
    assert compactions
    later = provider.requests[-1]
    assert later.messages[0].content.startswith(SUMMARY_PREFIX)
    assert "called read" in later.messages[0].content
    # Every tool message still follows the assistant turn that asked for it.
    for index, message in enumerate(later.messages):
        if message.role == "tool":
            assert index > 0 and later.messages[index - 1].role in ("assistant", "tool")
    # The event store's fold sees the same conversation the node sent.
    async with Runtime(tmp_path / "run.db") as rt:
        (info,) = await rt.store.list_runs()  # type: ignore[union-attr]
        state = await rt.get_state(info.run_id)
    assert to_chat_messages(state.conversation)[:-1] == later.messages
    # The compaction is recorded before the call it shrinks.
    seq_of = {id(e): i for i, e in enumerate(events)}
    turn_after = [t for t in of(events, LlmTurn) if seq_of[id(t)] > seq_of[id(compactions[0])]]
    assert turn_after


async def test_a_node_naming_an_unregistered_tool_is_refused_at_start(tmp_path: Path) -> None:
    node = llm("n", tools=["missing"], output_keys=["a"])
    provider = ScriptedProvider([reply("x")])
    async with Runtime(tmp_path / "run.db", provider=provider) as rt:
        with pytest.raises(SpecErrors, match=r"nodes\[0\]\.tools\[0\]: no tool 'missing'"):
            await rt.start(graph([node]))
        assert rt.store is not None and await rt.store.list_runs() == []
    assert provider.calls == 0


async def test_an_llm_node_without_a_provider_is_refused_at_start() -> None:
    async with Runtime(None) as rt:
        with pytest.raises(SpecErrors, match=r"nodes\[0\]\.kind: .*provider"):
            await rt.start(graph([llm("n", output_keys=["a"])]))
