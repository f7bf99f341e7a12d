"""Verifier nodes through the public API: expression, jsonpath and llm_judge checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    EdgeSpec,
    Goal,
    GraphSpec,
    NodeSpec,
    ProviderError,
    RetryPolicy,
    Runtime,
    ScriptedProvider,
    SpecErrors,
    graph_from_dict,
    validate_graph,
)
from runtime.events import NodeFailed, VerificationRecorded, fold
from runtime.spec import ExpressionVerifier, JsonPathAssertion, JsonPathVerifier, LlmJudgeVerifier
from runtime.testing import function_node

pytestmark = pytest.mark.anyio


def produce(inputs: dict[str, Any]) -> dict[str, Any]:
    return dict(inputs["fixture"])


def verifier_graph(config: Any, *, node_id: str = "check", **node: Any) -> GraphSpec:
    """produce -> check -> (passed: accept | otherwise: reject)."""
    key = config.result_key or f"{node_id}_verification"
    return GraphSpec(
        id="verify",
        entry_node="produce",
        terminal_nodes=["accept", "reject"],
        goal=Goal(description="Ship a good invoice", success_criteria=["amounts positive"]),
        nodes=[
            function_node("produce", output_keys=["invoice", "draft"], nullable_keys=["draft"]),
            NodeSpec(
                id=node_id,
                kind="verifier",
                output_keys=[key, f"{key}_passed"],
                verifier=config,
                **node,
            ),
            function_node("accept", "noop"),
            function_node("reject", "noop"),
        ],
        edges=[
            EdgeSpec(source="produce", target=node_id),
            EdgeSpec(
                source=node_id,
                target="accept",
                condition="conditional",
                expression=f"{key}_passed",
            ),
            EdgeSpec(source=node_id, target="reject", condition="always"),
        ],
    )


FUNCTIONS = {"produce": produce, "noop": lambda inputs: None}
INVOICE = {"line_items": [{"amount": 12.5, "sku": "A-1"}, {"amount": 3, "sku": "B-22"}]}


async def run(
    graph: GraphSpec, fixture: dict[str, Any], *, db: Path | None = None, **runtime: Any
) -> Any:
    async with Runtime(db, functions=FUNCTIONS, **runtime) as rt:
        result = await (await rt.start(graph, input={"fixture": fixture})).result()
        events = await rt.read_events(result.run_id)
    return result, events


async def test_an_expression_verifier_routes_on_its_passed_key() -> None:
    config = ExpressionVerifier(
        expression="length(memory['draft']) > 10 and goal['description'] == 'Ship a good invoice'"
    )
    graph = verifier_graph(config)
    passed, events = await run(graph, {"invoice": INVOICE, "draft": "long enough draft"})
    failed, _ = await run(graph, {"invoice": INVOICE, "draft": "short"})

    assert passed.path == ["produce", "check", "accept"]
    assert failed.path == ["produce", "check", "reject"]
    assert failed.status == "completed" and failed.quality == "clean"
    result = passed.memory["check_verification"]
    assert result["type"] == "expression" and result["passed"] is True
    assert result["extracted_value"] is True and result["evaluated_at"].endswith("+00:00")
    assert passed.memory["check_verification_passed"] is True
    assert failed.memory["check_verification_passed"] is False
    # The result is a fact of the log, and the fold gives the live memory.
    recorded = [e.body for e in events if isinstance(e.body, VerificationRecorded)]
    assert [(r.node_id, r.visit, r.attempt, r.passed) for r in recorded] == [("check", 1, 1, True)]
    assert fold(events).memory == passed.memory
    assert config.type == "expression" and judge_config().type == "llm_judge"


async def test_an_expression_that_cannot_be_evaluated_fails_the_node_naming_it() -> None:
    graph = verifier_graph(ExpressionVerifier(expression="memory['missing'] > 1"))
    result, events = await run(graph, {"invoice": INVOICE})
    # The always edge is the failure route too: the node failed, it was not a "no".
    assert result.path == ["produce", "check", "reject"]
    assert result.quality == "degraded"
    failure = next(e.body for e in events if isinstance(e.body, NodeFailed))
    assert failure.error_type == "ExpressionError" and "missing" in failure.error
    assert not failure.will_retry  # the same expression fails the same way again


@pytest.mark.parametrize(
    ("path", "op", "value", "passed"),
    [
        ("$.line_items[*].amount", "gt", 0, True),
        ("$.line_items[*].amount", "gt", 5, False),
        ("$.line_items[*].amount", "lte", 12.5, True),
        ("$.line_items[*].sku", "matches", r"^[A-Z]-\d+$", True),
        ("$.line_items[*].sku", "matches", r"^[A-Z]-\d$", False),
        ("$.line_items", "length_equals", 2, True),
        ("$.line_items[*].sku", "length_lt", 4, False),
        ("$.line_items[0]", "contains", "sku", True),
        ("$.line_items[?@.amount > 10].sku", "equals", "A-1", True),
        ("$.line_items[*].discount", "exists", None, False),
        ("$.line_items[*].discount", "not_exists", None, True),
        ("$.line_items[*].discount", "not_equals", 1, False),  # no match: not satisfied
    ],
)
async def test_a_jsonpath_verifier_asserts_over_every_match(
    path: str, op: Any, value: Any, passed: bool
) -> None:
    config = JsonPathVerifier(
        target_key="invoice", path=path, assertion=JsonPathAssertion(op=op, value=value)
    )
    result, _ = await run(verifier_graph(config), {"invoice": INVOICE})
    verification = result.memory["check_verification"]
    assert verification["passed"] is passed, verification["reasoning"]
    assert result.path[-1] == ("accept" if passed else "reject")


async def test_a_catastrophic_regex_is_a_failed_check_bounded_in_time() -> None:
    config = JsonPathVerifier(
        target_key="invoice",
        path="$.note",
        assertion=JsonPathAssertion(op="matches", value=r"^(a|aa)+$"),
    )
    result, _ = await run(verifier_graph(config), {"invoice": {"note": "a" * 60 + "!"}})
    verification = result.memory["check_verification"]
    assert verification["passed"] is False
    assert "longer than" in verification["reasoning"]


def critic(*answers: str) -> ScriptedProvider:
    return ScriptedProvider(list(answers), name="critic")


def judge_config(**fields: Any) -> LlmJudgeVerifier:
    fields.setdefault("evaluator", "critic")
    return LlmJudgeVerifier(target_key="draft", evaluation_criteria="Accurate and clear.", **fields)


@pytest.mark.parametrize(
    ("answer", "score", "passed"),
    [
        ('{"score": 0.9, "reasoning": "clear"}', 0.9, True),
        ('Here you go:\n```json\n{"score": 0.8}\n```', 0.8, True),
        ("Score: 7/10, too vague", 0.7, False),
        ("85%", 0.85, True),
        ("0.79", 0.79, False),
    ],
)
async def test_an_llm_judge_verifier_scores_against_the_threshold(
    answer: str, score: float, passed: bool
) -> None:
    evaluator = critic(answer)
    result, events = await run(
        verifier_graph(judge_config(model="small-judge")),
        {"invoice": INVOICE, "draft": "Our kettle boils in 95 s."},
        providers={"critic": evaluator},
    )
    verification = result.memory["check_verification"]
    assert verification["score"] == pytest.approx(score)
    assert verification["threshold"] == 0.8 and verification["passed"] is passed
    assert result.path[-1] == ("accept" if passed else "reject")
    request = evaluator.requests[0]
    assert request.model == "small-judge" and request.purpose == "verify"
    assert "Accurate and clear." in request.messages[0].content
    assert "Our kettle boils in 95 s." in request.messages[0].content
    recorded = next(e.body for e in events if isinstance(e.body, VerificationRecorded))
    assert recorded.reply == answer


@pytest.mark.parametrize(
    "answer", ["I cannot judge this.", '{"score": "high"}', "Score: 8", '{"score": -0.1}']
)
async def test_an_unparseable_evaluator_reply_is_a_clear_failed_verification(answer: str) -> None:
    result, _ = await run(
        verifier_graph(judge_config()),
        {"invoice": INVOICE, "draft": "text"},
        providers={"critic": critic(answer)},
    )
    verification = result.memory["check_verification"]
    assert verification["passed"] is False and verification["score"] is None
    assert "no score from 0 to 1" in verification["reasoning"]
    assert result.status == "completed" and result.path[-1] == "reject"


async def test_the_runtime_provider_is_the_default_evaluator_and_an_unset_target_not_sent() -> None:
    default = ScriptedProvider(['{"score": 1}'])
    graph = verifier_graph(judge_config(evaluator=None))
    result, _ = await run(graph, {"invoice": INVOICE, "draft": "x"}, provider=default)
    assert result.memory["check_verification_passed"] is True and default.calls == 1
    unset, _ = await run(graph, {"invoice": INVOICE}, provider=default)
    assert "is not set" in unset.memory["check_verification"]["reasoning"]
    assert default.calls == 1


async def test_an_unknown_evaluator_is_refused_when_the_run_starts() -> None:
    async with Runtime(None, functions=FUNCTIONS, providers={"other": critic()}) as rt:
        with pytest.raises(SpecErrors) as info:
            await rt.start(verifier_graph(judge_config()))
    assert info.value.errors[0].path == "nodes[1].verifier.evaluator"
    assert "'critic'" in str(info.value)


async def test_throw_on_fail_fails_the_node_so_its_retry_policy_and_on_failure_apply() -> None:
    evaluator = critic('{"score": 0.2}', '{"score": 0.3}')
    config = judge_config(throw_on_fail=True)
    graph = verifier_graph(config, retry=RetryPolicy(max_attempts=2, initial_delay=0, jitter=0))
    result, events = await run(
        graph, {"invoice": INVOICE, "draft": "x"}, providers={"critic": evaluator}
    )
    failures = [e.body for e in events if isinstance(e.body, NodeFailed)]
    assert [(f.attempt, f.will_retry, f.error_type) for f in failures] == [
        (1, True, "VerificationFailed"),
        (2, False, "VerificationFailed"),
    ]
    assert "score 0.3 < threshold 0.8" in failures[1].error
    assert evaluator.calls == 2 and result.total_retries == 1
    assert result.path == ["produce", "check", "reject"] and result.quality == "degraded"
    assert "check_verification" not in result.memory


async def test_an_evaluator_that_fails_fails_the_node_not_the_run() -> None:
    evaluator = critic(ProviderError("critic", "down"))  # type: ignore[arg-type]
    graph = verifier_graph(judge_config(), retry=RetryPolicy(max_attempts=1))
    result, events = await run(
        graph, {"invoice": INVOICE, "draft": "x"}, providers={"critic": evaluator}
    )
    failure = next(e.body for e in events if isinstance(e.body, NodeFailed))
    assert failure.error_type == "ProviderError" and "down" in failure.error
    assert result.status == "completed" and result.path[-1] == "reject"


def test_validation_requires_both_result_keys_in_output_keys() -> None:
    graph = verifier_graph(ExpressionVerifier(expression="True", result_key="v"))
    data = json.loads(json.dumps(graph_from_dict_input(graph)))
    data["nodes"][1]["output_keys"] = ["v"]
    with pytest.raises(SpecErrors) as info:
        graph_from_dict(data)
    assert [(e.path, "'v_passed'" in e.reason) for e in info.value.errors] == [
        ("nodes[1].output_keys", True)
    ]


@pytest.mark.parametrize(
    ("verifier", "path"),
    [
        ({"type": "jsonpath", "target_key": "x", "path": "$[", "assertion": {"op": "exists"}},
         "nodes[1].verifier.path"),
        ({"type": "jsonpath", "target_key": "x", "path": "$.a"}, "nodes[1].verifier.assertion"),
        ({"type": "jsonpath", "target_key": "x", "path": "$.a",
          "assertion": {"op": "matches", "value": "(unclosed"}},
         "nodes[1].verifier.assertion.value"),
        ({"type": "jsonpath", "target_key": "x", "path": "$.a",
          "assertion": {"op": "length_gt", "value": "3"}},
         "nodes[1].verifier.assertion.value"),
        ({"type": "llm_judge", "target_key": "x"}, "nodes[1].verifier.evaluation_criteria"),
        ({"type": "expression", "expression": "x", "throw_on_fail": "yes"},
         "nodes[1].verifier.throw_on_fail"),
    ],
)  # fmt: skip
def test_bad_verifier_configurations_name_their_field(verifier: dict[str, Any], path: str) -> None:
    graph = verifier_graph(ExpressionVerifier(expression="True"))
    data = graph_from_dict_input(graph)
    data["nodes"][1]["verifier"] = verifier
    with pytest.raises(Exception) as info:  # SpecError (types) or SpecErrors (validation)
        graph_from_dict(data)
    errors = getattr(info.value, "errors", [info.value])
    assert path in [e.path for e in errors], errors


def graph_from_dict_input(graph: GraphSpec) -> dict[str, Any]:
    from runtime.spec import graph_to_dict

    validate_graph(graph)
    return graph_to_dict(graph)
