from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import ActorSystem
from runtime._errors import ProviderHTTPError, ProviderTimeoutError
from runtime.llm._judge import ImplicitJudge, parse_quality_answer, rule
from runtime.llm._judge_actor import JudgeActor, JudgeRequest
from runtime.llm._verdict import (
    JudgeContext,
    JudgeVerdict,
    feedback_message,
    judge_context,
    max_iterations_verdict,
    missing_required_keys,
    should_judge,
    stall_verdict,
)
from runtime.providers._base import ChatMessage, LlmRequest
from runtime.providers._scripted import ScriptedProvider

pytestmark = pytest.mark.anyio

TRAVEL_KEYS = ["flight_options", "hotel_recommendations", "budget_estimate"]


def ctx(
    accumulator: dict[str, Any] | None = None,
    *,
    keys: list[str] | None = None,
    nullable: list[str] | None = None,
    tools: bool = False,
    criteria: list[str] | None = None,
    client_facing: bool = False,
    messages: list[ChatMessage] | None = None,
    iteration: int = 1,
) -> JudgeContext:
    return judge_context(
        node_id="travel",
        node_description="Plan the trip",
        iteration=iteration,
        accumulator=accumulator or {},
        expected_keys=TRAVEL_KEYS if keys is None else keys,
        nullable_keys=nullable or [],
        turn_had_tool_calls=tools,
        success_criteria=criteria or [],
        client_facing=client_facing,
        messages=messages or [],
    )


FULL = {
    "flight_options": "some flights exist",
    "hotel_recommendations": "hotels available",
    "budget_estimate": "around $1000",
}
CRITERIA = ["Provide specific flight numbers, hotel names with ratings, and itemized budget."]


def judge_only(*answers: Any) -> ScriptedProvider:
    return ScriptedProvider([], judge=list(answers))


# --- the implicit cascade --------------------------------------------------------------


async def test_tool_calls_bail_out_without_evaluating() -> None:
    provider = judge_only()
    verdict = await ImplicitJudge(provider).evaluate(ctx({}, tools=True, criteria=CRITERIA))
    assert (verdict.action, verdict.level, verdict.feedback) == ("retry", "bail_out", "")
    assert provider.calls == 0


async def test_level0_names_missing_required_keys_like_the_seed() -> None:
    acc = {"flight_options": "3 direct flights found", "hotel_recommendations": "5 hotels"}
    verdict = await ImplicitJudge().evaluate(ctx(acc))
    assert verdict.action == "retry"
    assert verdict.level == "structural"
    assert verdict.feedback.startswith("Missing required output keys: budget_estimate. ")


async def test_none_value_counts_as_missing_but_nullable_keys_do_not() -> None:
    assert missing_required_keys({"a": None, "b": 0}, ["a", "b", "c"], ["c"]) == ["a"]
    context = ctx({"a": "x"}, keys=["a", "b"], nullable=["b"])
    assert context.missing_keys == []
    assert (await ImplicitJudge().evaluate(context)).action == "accept"


async def test_all_nullable_and_none_set_retries() -> None:
    context = ctx({}, keys=["a", "b"], nullable=["a", "b"])
    verdict = await ImplicitJudge().evaluate(context)
    assert (verdict.action, verdict.level) == ("retry", "structural")
    assert "a, b" in verdict.feedback
    one_set = ctx({"b": 1}, keys=["a", "b"], nullable=["a", "b"])
    assert (await ImplicitJudge().evaluate(one_set)).action == "accept"


async def test_client_facing_node_without_output_keys_never_auto_accepts() -> None:
    provider = judge_only('{"verdict": "ACCEPT"}')
    judge = ImplicitJudge(provider)
    verdict = await judge.evaluate(ctx({}, keys=[], client_facing=True, criteria=CRITERIA))
    assert verdict.action != "accept"
    assert (verdict.action, verdict.level, verdict.feedback) == ("retry", "structural", "")
    assert provider.calls == 0
    # The same node without client_facing accepts on structure alone.
    assert (await judge.evaluate(ctx({}, keys=[]))).action == "accept"


async def test_structural_pass_without_criteria_accepts() -> None:
    verdict = await ImplicitJudge(judge_only()).evaluate(ctx(FULL))
    assert verdict == JudgeVerdict(action="accept", level="structural")


async def test_criteria_without_provider_accept_on_structure() -> None:
    verdict = await ImplicitJudge().evaluate(ctx(FULL, criteria=CRITERIA))
    assert (verdict.action, verdict.level) == ("accept", "structural")


async def test_level2_retry_with_feedback_and_confidence() -> None:
    answer = json.dumps(
        {
            "verdict": "RETRY",
            "confidence": 0.85,
            "feedback": "Outputs lack specificity. Flight options should include carrier.",
        }
    )
    provider = judge_only(answer)
    recent = [ChatMessage(role="user", content=f"msg {i}") for i in range(15)]
    context = ctx(FULL, criteria=CRITERIA, messages=recent)
    verdict = await ImplicitJudge(provider, model="fast-model").evaluate(context)
    assert verdict == JudgeVerdict(
        action="retry",
        level="quality",
        feedback="Outputs lack specificity. Flight options should include carrier.",
        confidence=0.85,
    )
    [request] = provider.requests_for("judge")
    assert request.json_response is True
    assert request.model == "fast-model"
    prompt = request.messages[-1].content
    assert "Plan the trip" in prompt
    assert CRITERIA[0] in prompt
    assert "- budget_estimate: around $1000" in prompt
    assert "[user] msg 14" in prompt and "[user] msg 5" in prompt
    assert "msg 4" not in prompt  # only the last 10 messages


async def test_level2_accept() -> None:
    provider = judge_only('Sure! ```json\n{"verdict": "accept", "confidence": 3}\n```')
    verdict = await ImplicitJudge(provider).evaluate(ctx(FULL, criteria=CRITERIA))
    assert (verdict.action, verdict.level, verdict.confidence) == ("accept", "quality", 1.0)


async def test_judge_failure_accepts_with_error_after_retries() -> None:
    errors = [ProviderHTTPError("p", "rate limited", status=429) for _ in range(3)]
    provider = judge_only(*errors)
    verdict = await ImplicitJudge(provider, retries=2).evaluate(ctx(FULL, criteria=CRITERIA))
    assert (verdict.action, verdict.level) == ("accept", "quality")
    assert verdict.error is not None and "rate limited" in verdict.error
    assert provider.calls_for("judge") == 3


async def test_judge_recovers_within_its_retries() -> None:
    provider = judge_only(ProviderTimeoutError("p", "slow"), "not json at all, sorry", "RETRY")
    verdict = await ImplicitJudge(provider, retries=2).evaluate(ctx(FULL, criteria=CRITERIA))
    assert (verdict.action, verdict.level, verdict.error) == ("retry", "quality", None)
    assert provider.calls_for("judge") == 3


async def test_unparseable_answers_are_a_judge_failure() -> None:
    provider = judge_only("hmm", '{"verdict": "MAYBE"}')
    verdict = await ImplicitJudge(provider, retries=1).evaluate(ctx(FULL, criteria=CRITERIA))
    assert verdict.action == "accept"
    assert verdict.error is not None and "unparseable" in verdict.error


async def test_fail_closed_escalates_instead_of_accepting() -> None:
    provider = judge_only(ProviderHTTPError("p", "down", status=503))
    judge = ImplicitJudge(provider, fail_closed=True, retries=0)
    verdict = await judge.evaluate(ctx(FULL, criteria=CRITERIA))
    assert (verdict.action, verdict.level) == ("escalate", "quality")
    assert verdict.error is not None and "down" in verdict.error
    assert "down" in verdict.feedback


async def test_parse_quality_answer_forms() -> None:
    assert parse_quality_answer("ACCEPT") == JudgeVerdict(action="accept", level="quality")
    assert parse_quality_answer("retry.") == JudgeVerdict(action="retry", level="quality")
    v = parse_quality_answer("RETRY: the budget is not itemised")
    assert v is not None and v.feedback == "RETRY: the budget is not itemised"
    assert parse_quality_answer("I accept, no wait, retry") is None
    assert parse_quality_answer("") is None
    assert parse_quality_answer('{"verdict": 1}') is None
    v = parse_quality_answer('{"verdict": " Retry ", "confidence": true, "feedback": 5}')
    assert v == JudgeVerdict(action="retry", level="quality")
    # NaN (which the parser takes) says nothing: no confidence, not 0; out of range clamps.
    v = parse_quality_answer('{"verdict": "ACCEPT", "confidence": NaN}')
    assert v is not None and v.confidence is None
    v = parse_quality_answer('{"verdict": "ACCEPT", "confidence": 7}')
    assert v is not None and v.confidence == 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parse_quality_answer_never_raises(text: str) -> None:
    verdict = parse_quality_answer(text)
    assert verdict is None or verdict.action in ("accept", "retry")


# --- custom judges and safety nets -----------------------------------------------------


class Fixed:
    def __init__(self, result: Any) -> None:
        self.result = result
        self.seen: list[JudgeContext] = []

    async def evaluate(self, context: JudgeContext) -> Any:
        self.seen.append(context)
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


async def test_custom_judge_verdict_gets_level_custom() -> None:
    custom = Fixed(JudgeVerdict(action="escalate", level="quality", feedback="wrong"))
    verdict = await rule(ctx(FULL), judge=custom, implicit=ImplicitJudge())
    assert verdict == JudgeVerdict(action="escalate", level="custom", feedback="wrong")
    assert custom.seen[0].accumulator == FULL
    verdict = await rule(ctx(FULL, tools=True), judge=Fixed("ACCEPT"), implicit=ImplicitJudge())
    assert verdict == JudgeVerdict(action="accept", level="custom")


async def test_custom_accept_with_missing_keys_is_overridden() -> None:
    acc = {"flight_options": "x"}
    verdict = await rule(ctx(acc), judge=Fixed("accept"), implicit=ImplicitJudge())
    assert (verdict.action, verdict.level) == ("retry", "override")
    assert verdict.feedback.startswith(
        "Missing required output keys: hotel_recommendations, budget_estimate."
    )
    retry = await rule(ctx(acc), judge=Fixed("retry"), implicit=ImplicitJudge())
    assert (retry.action, retry.level) == ("retry", "custom")


async def test_raising_custom_judge_falls_back_to_the_cascade() -> None:
    boom = Fixed(RuntimeError("bug in judge"))
    incomplete = await rule(ctx({"flight_options": "x"}), judge=boom, implicit=ImplicitJudge())
    assert (incomplete.action, incomplete.level) == ("retry", "structural")
    assert incomplete.error == "custom judge failed: RuntimeError: bug in judge"
    working = await rule(ctx(FULL, tools=True), judge=boom, implicit=ImplicitJudge())
    assert (working.action, working.level) == ("retry", "bail_out")
    done = await rule(ctx(FULL), judge=boom, implicit=ImplicitJudge())
    assert (done.action, done.level) == ("accept", "structural")
    assert done.error is not None
    odd = await rule(ctx(FULL), judge=Fixed(42), implicit=ImplicitJudge())
    assert odd.error is not None and "returned 42" in odd.error


async def test_should_judge() -> None:
    assert should_judge(1, 1, True) is True
    assert should_judge(3, 3, True) is True
    assert [should_judge(i, 3, True) for i in range(1, 7)] == [False, False, True] * 2
    assert should_judge(2, 3, False) is True  # a text-only turn is always judged


async def test_max_iterations_verdict() -> None:
    assert max_iterations_verdict(49, 50) is None
    done = max_iterations_verdict(50, 50)
    assert done is not None and (done.action, done.level) == ("accept", "max_iterations")
    failed = max_iterations_verdict(50, 50, missing_keys=["budget_estimate"])
    assert failed is not None and (failed.action, failed.level) == ("escalate", "max_iterations")
    assert "budget_estimate" in failed.feedback


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=60), st.integers(min_value=1, max_value=60))
def test_max_iterations_bounds_the_loop(max_iterations: int, extra: int) -> None:
    # A loop that stops at the first non-None max_iterations verdict never exceeds the cap.
    turns = 0
    for iteration in range(1, max_iterations + extra + 1):
        turns = iteration
        if max_iterations_verdict(iteration, max_iterations) is not None:
            break
    assert turns == max_iterations


async def test_feedback_message_and_stall_verdict() -> None:
    verdict = JudgeVerdict(action="retry", level="structural", feedback="Do X.")
    assert feedback_message(verdict) == "[Judge feedback]: Do X."
    stall = stall_verdict()
    assert (stall.action, stall.level) == ("retry", "stall")
    assert "3 turns in a row" in stall.feedback
    assert "Ask the user" in stall_verdict(client_facing=True).feedback


async def test_verdict_and_context_encode_for_the_log() -> None:
    context = ctx(FULL, messages=[ChatMessage(role="user", content="hi")])
    assert msgspec.json.decode(msgspec.json.encode(context), type=JudgeContext) == context
    verdict = JudgeVerdict(action="retry", level="quality", confidence=0.5, error="e")
    assert msgspec.json.decode(msgspec.json.encode(verdict), type=JudgeVerdict) == verdict
    request = JudgeRequest(context=context)
    data = msgspec.json.decode(msgspec.json.encode(request))
    assert data["type"] == "judge.request"


# --- the actor -------------------------------------------------------------------------


async def test_judge_actor_answers_with_the_rule_verdict() -> None:
    provider = judge_only('{"verdict": "RETRY", "feedback": "be specific"}')
    async with ActorSystem() as system:
        ref = system.spawn(JudgeActor(ImplicitJudge(provider)))
        missing = await ref.ask(JudgeRequest(context=ctx({})), timeout=5)
        assert (missing.action, missing.level) == ("retry", "structural")
        quality = await ref.ask(JudgeRequest(context=ctx(FULL, criteria=CRITERIA)), timeout=5)
        assert (quality.action, quality.feedback) == ("retry", "be specific")
        custom = system.spawn(JudgeActor(ImplicitJudge(), judge=Fixed("accept")))
        overridden = await custom.ask(JudgeRequest(context=ctx({})), timeout=5)
        assert overridden.level == "override"


async def test_judge_actor_request_is_a_scripted_judge_call() -> None:
    def answer(request: LlmRequest) -> str:
        assert request.purpose == "judge"
        return '{"verdict": "ACCEPT", "confidence": 0.9}'

    provider = ScriptedProvider([], judge=answer)
    verdict = await ImplicitJudge(provider).evaluate(ctx(FULL, criteria=CRITERIA))
    assert (verdict.action, verdict.confidence) == ("accept", 0.9)
    assert provider.calls_for("turn") == 0


async def test_a_custom_verdict_struct_with_an_unknown_action_is_a_judge_failure() -> None:
    # A struct is not checked when built: its action is, so the log never holds a value
    # the catalogue's Verdict cannot read back.
    shouted = Fixed(JudgeVerdict(action="ACCEPT", level="quality"))  # type: ignore[arg-type]
    verdict = await rule(ctx(FULL), judge=shouted, implicit=ImplicitJudge())
    assert (verdict.action, verdict.level) == ("accept", "custom")
    odd = Fixed(JudgeVerdict(action="maybe", level="custom"))  # type: ignore[arg-type]
    failed = await rule(ctx(FULL), judge=odd, implicit=ImplicitJudge())
    assert failed.action in ("accept", "retry", "escalate") and failed.level != "custom"
    assert failed.error is not None and "the action 'maybe'" in failed.error
