"""The verifier node: check a value in memory, write a VerificationResult, route on it.

One :class:`VerifierNodeActor` per verifier node of a run. For each ``ExecuteNode`` it runs
the configured check (see ``_verifier_spec``), records a ``VerificationRecorded`` event
(the result, and for ``llm_judge`` the evaluator's reply and token usage), and tells the
executor ``NodeDone``:

- by default the node succeeds with two outputs, ``{result_key}`` (the result as a
  mapping) and ``{result_key}_passed`` (a boolean), and edges route on the boolean;
- with ``throw_on_fail`` a failed check fails the node (``error_type
  "VerificationFailed"``), so the retry policy and ``on_failure`` edges apply;
- an expression that cannot be evaluated, or an evaluator call that failed after the
  provider's own retries, fails the node (a check that could not run is not a verdict).

Record before act: the result is committed before the node reports. An ``llm_judge``
attempt that finds its result already recorded (a crash after the evaluator answered)
reuses it and never asks the evaluator again. It looks in the run's live state (the
node's visit keeps its ``VerificationRecorded`` by attempt, see ``runtime.events._node_visit``),
never in the log, so an attempt costs the same however long the run is.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from actors import Actor, ActorRef

from .._errors import ExpressionError, MalformedResponseError, ProviderError, SpecError
from ..engine._messages import ExecuteNode, NodeDone
from ..engine._runlog import RunLog
from ..events._catalogue import VerificationRecorded
from ..providers._base import ChatMessage, LlmProvider, LlmRequest, parse_json_object
from ..spec._expr import compile_expression
from ..spec._model import GraphSpec, NodeSpec
from ..spec._verifier import (
    ExpressionVerifier,
    JsonPathAssertion,
    JsonPathVerifier,
    LlmJudgeVerifier,
    VerificationResult,
    VerifierSpec,
    result_keys,
)

__all__ = [
    "EVALUATOR_SYSTEM_PROMPT",
    "VerifierNodeActor",
    "assert_matches",
    "check_named_providers",
    "parse_score",
    "verify_expression",
    "verify_jsonpath",
]

#: Seconds one ``matches`` regex may run on one match before the check fails.
REGEX_TIMEOUT_S: Final = 0.1
#: Characters of the target shown to the evaluator (the rest is cut, and it is told so).
_MAX_TARGET_CHARS: Final = 40_000

EVALUATOR_SYSTEM_PROMPT: Final = (
    "You are a strict evaluator. Score the content against the criteria with a number "
    "from 0 (fails completely) to 1 (meets them fully). Answer with one JSON object: "
    '{"score": <number from 0 to 1>, "reasoning": "<one or two sentences>"}.'
)

#: Looks up a provider by the evaluator name of an llm_judge verifier (None: the default).
ProviderLookup = Callable[[str | None], LlmProvider | None]


def check_named_providers(graph: GraphSpec, providers: ProviderLookup) -> list[SpecError]:
    """Start-time problems: an ``llm_judge`` verifier's or the goal's evaluator that names
    no configured provider."""
    errors: list[SpecError] = []
    for index, node in enumerate(graph.nodes):
        if isinstance(node.verifier, LlmJudgeVerifier):
            name = node.verifier.evaluator
            if providers(name) is None:
                reason = (
                    "no provider is configured (Runtime(provider=...))"
                    if name is None
                    else f"no provider {name!r} in Runtime(providers=...)"
                )
                errors.append(SpecError(f"nodes[{index}].verifier.evaluator", reason))
    goal = graph.goal
    if goal is not None and goal.evaluator is not None and providers(goal.evaluator) is None:
        errors.append(
            SpecError("goal.evaluator", f"no provider {goal.evaluator!r} in Runtime(providers=...)")
        )
    return errors


class _Failure(Exception):
    """The check could not run: the node fails with ``error_type``."""

    def __init__(self, error_type: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.retryable = retryable


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class VerifierNodeActor(Actor):
    """Runs one verifier node of one run (see the module docstring)."""

    def __init__(
        self,
        graph: GraphSpec,
        spec: NodeSpec,
        executor: ActorRef,
        log: RunLog,
        *,
        providers: ProviderLookup,
    ) -> None:
        assert spec.verifier is not None  # validation guarantees it
        self.spec = spec
        self.config: VerifierSpec = spec.verifier
        self.goal = None if graph.goal is None else msgspec.to_builtins(graph.goal)
        self.executor = executor
        self.log = log
        self.providers = providers

    async def receive(self, message: Any) -> Any:
        """Run one check and tell the executor its NodeDone.

        Blocks on the log (and, for ``llm_judge``, the evaluator). Store errors propagate:
        the actor stops and the executor records the crash.
        """
        assert isinstance(message, ExecuteNode)
        await self.executor.tell(await self._attempt(message))

    async def _attempt(self, message: ExecuteNode) -> NodeDone:
        config = self.config
        try:
            recorded = self._recorded(message)
            if recorded is not None:
                result = msgspec.convert(recorded.result, VerificationResult)
            else:
                body = await self._verify(message)
                result = msgspec.convert(body.result, VerificationResult)
                await self.log.append([body])
        except _Failure as failure:
            return self._done(
                message,
                error=str(failure),
                error_type=failure.error_type,
                retryable=failure.retryable,
            )
        key, passed_key = result_keys(self.spec.id, config)
        if not result.passed and config.throw_on_fail:
            return self._done(
                message,
                error=f"verification failed: {result.reasoning}",
                error_type="VerificationFailed",
            )
        return NodeDone(
            node_id=message.node_id,
            attempt=message.attempt,
            branch=message.branch,
            success=True,
            outputs={key: msgspec.to_builtins(result), passed_key: result.passed},
        )

    def _recorded(self, message: ExecuteNode) -> VerificationRecorded | None:
        """This attempt's result if it is recorded already (only llm_judge looks).

        Read from the node's visit in the run's live state, never from the log.
        """
        if not isinstance(self.config, LlmJudgeVerifier):
            return None  # the deterministic checks give the same answer again
        visit = self.log.state.visits.get(message.node_id)
        if visit is None or visit.visit != message.visit:
            return None
        return visit.verifications.get(message.attempt)

    async def _verify(self, message: ExecuteNode) -> VerificationRecorded:
        config = self.config
        memory = message.inputs
        reply = ""
        tokens = (0, 0)
        model = ""
        if isinstance(config, ExpressionVerifier):
            result = verify_expression(config, memory, self.goal)
        elif isinstance(config, JsonPathVerifier):
            result = verify_jsonpath(config, memory)
        else:
            result, reply, tokens, model = await self._judge(config, memory)
        return VerificationRecorded(
            node_id=message.node_id,
            visit=message.visit,
            attempt=message.attempt,
            branch=message.branch,
            passed=result.passed,
            result=msgspec.to_builtins(result),
            reply=reply,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            model=model,
        )

    async def _judge(
        self, config: LlmJudgeVerifier, memory: Mapping[str, Any]
    ) -> tuple[VerificationResult, str, tuple[int, int], str]:
        if config.target_key not in memory:
            result = VerificationResult(
                type="llm_judge",
                passed=False,
                reasoning=f"memory key {config.target_key!r} is not set: nothing to evaluate",
                threshold=config.pass_threshold,
                evaluated_at=_now(),
            )
            return result, "", (0, 0), ""
        provider = self.providers(config.evaluator)
        if provider is None:
            name = "the runtime's provider" if config.evaluator is None else repr(config.evaluator)
            raise _Failure("SpecError", f"evaluator {name} is not configured")
        request = LlmRequest(
            messages=[ChatMessage(role="user", content=evaluator_prompt(config, memory))],
            system=EVALUATOR_SYSTEM_PROMPT,
            model=config.model,
            max_tokens=512,
            temperature=0.0,
            json_response=True,
            purpose="verify",
        )
        try:
            response = await provider.complete(request)
        except ProviderError as exc:
            raise _Failure(
                type(exc).__name__, f"the evaluator failed: {exc}", retryable=True
            ) from exc
        score, reasoning = parse_score(response.text)
        if score is None:
            result = VerificationResult(
                type="llm_judge",
                passed=False,
                reasoning=f"the evaluator's reply has no score from 0 to 1 ({reasoning})",
                threshold=config.pass_threshold,
                extracted_value=response.text,
                evaluated_at=_now(),
            )
        else:
            passed = score >= config.pass_threshold
            result = VerificationResult(
                type="llm_judge",
                passed=passed,
                reasoning=reasoning
                or f"score {score:g} {'>=' if passed else '<'} threshold {config.pass_threshold:g}",
                score=score,
                threshold=config.pass_threshold,
                extracted_value=response.text,
                evaluated_at=_now(),
            )
        usage = (response.usage.input_tokens, response.usage.output_tokens)
        return result, response.text, usage, response.model

    def _done(
        self, message: ExecuteNode, *, error: str, error_type: str, retryable: bool = True
    ) -> NodeDone:
        return NodeDone(
            node_id=message.node_id,
            attempt=message.attempt,
            branch=message.branch,
            success=False,
            error=error,
            error_type=error_type,
            # A check that could not run (a bad expression) fails the same way again.
            retryable=retryable,
        )


# ------------------------------------------------------------------ the three checks


def verify_expression(
    config: ExpressionVerifier, memory: Mapping[str, Any], goal: Any
) -> VerificationResult:
    """Evaluate the expression over ``memory`` and ``goal`` (see ExpressionVerifier).

    Raises ``_Failure`` (ExpressionError) when it cannot be evaluated.
    """
    names = {**memory, "memory": dict(memory), "goal": goal}
    try:
        value = compile_expression(config.expression).evaluate(names)
        passed = bool(value)
    except ExpressionError as exc:
        raise _Failure("ExpressionError", str(exc)) from exc
    except Exception as exc:  # bool() of a foreign value: the expression's fault, said so
        raise _Failure("ExpressionError", f"{config.expression!r}: {exc}") from exc
    return VerificationResult(
        type="expression",
        passed=passed,
        reasoning=f"{config.expression} is {'truthy' if passed else 'falsy'}",
        extracted_value=_plain(value),
        evaluated_at=_now(),
    )


def verify_jsonpath(config: JsonPathVerifier, memory: Mapping[str, Any]) -> VerificationResult:
    """Query ``memory[target_key]`` with the path, then check the assertion on the matches."""
    assertion = config.assertion
    assert assertion is not None  # validation guarantees it

    def result(passed: bool, reasoning: str, values: list[Any] | None) -> VerificationResult:
        return VerificationResult(
            type="jsonpath",
            passed=passed,
            reasoning=reasoning,
            extracted_value=values,
            evaluated_at=_now(),
        )

    if config.target_key not in memory:
        return result(False, f"memory key {config.target_key!r} is not set", None)
    import jsonpath_rfc9535  # imported when a jsonpath verifier runs

    try:
        nodes = jsonpath_rfc9535.compile(config.path).find(_plain(memory[config.target_key]))
    except jsonpath_rfc9535.JSONPathError as exc:
        return result(False, f"{config.path} cannot be applied: {exc}", None)
    values = [node.value for node in nodes]
    passed, reasoning = assert_matches(assertion, values)
    return result(passed, f"{config.path}: {reasoning}", values)


def assert_matches(assertion: JsonPathAssertion, values: list[Any]) -> tuple[bool, str]:
    """Whether ``assertion`` holds for the matched ``values``, and why (see AssertionOp)."""
    op, operand = assertion.op, assertion.value
    if op == "exists":
        return (bool(values), f"{len(values)} match(es)")
    if op == "not_exists":
        return (not values, f"{len(values)} match(es)")
    if not values:
        return False, "no match"
    for index, value in enumerate(values):
        ok, why = _holds(op, value, operand)
        if not ok:
            return False, f"match {index} ({_short(value)}) fails {op} {_short(operand)}: {why}"
    return True, f"all {len(values)} match(es) satisfy {op} {_short(operand)}"


def _holds(op: str, value: Any, operand: Any) -> tuple[bool, str]:
    if op == "equals":
        return value == operand, "not equal"
    if op == "not_equals":
        return value != operand, "equal"
    if op in ("gt", "gte", "lt", "lte"):
        comparable = (_is_number(value) and _is_number(operand)) or (
            isinstance(value, str) and isinstance(operand, str)
        )
        if not comparable:
            return False, f"a {type(value).__name__} is not comparable with the operand"
        holds = {
            "gt": value > operand,
            "gte": value >= operand,
            "lt": value < operand,
            "lte": value <= operand,
        }[op]
        return holds, "comparison is false"
    if op == "matches":
        if not isinstance(value, str):
            return False, f"a {type(value).__name__} is not a string"
        import regex  # imported when a regex check runs

        try:
            found = regex.search(operand, value, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            return False, f"the regex ran longer than {REGEX_TIMEOUT_S} s"
        return found is not None, "no match of the regex"
    if op == "contains":
        if isinstance(value, str):
            return isinstance(operand, str) and operand in value, "not contained"
        if isinstance(value, list | dict):
            try:
                return operand in value, "not contained"
            except TypeError:  # an unhashable operand tested against an object's keys
                return False, "not contained"
        return False, f"a {type(value).__name__} contains nothing"
    # length_*
    if not isinstance(value, str | list | dict):
        return False, f"a {type(value).__name__} has no length"
    size = len(value)
    holds = {
        "length_equals": size == operand,
        "length_gt": size > operand,
        "length_gte": size >= operand,
        "length_lt": size < operand,
        "length_lte": size <= operand,
    }[op]
    return holds, f"its length is {size}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: Any) -> Any:
    """``value`` as JSON-like builtins (what the log would give back anyway)."""
    try:
        return msgspec.to_builtins(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value)


# ------------------------------------------------------------------ the evaluator


def evaluator_prompt(config: LlmJudgeVerifier, memory: Mapping[str, Any]) -> str:
    """The user message the evaluator gets: the criteria, then the content."""
    value = memory[config.target_key]
    if isinstance(value, str):
        content = value
    else:
        content = json.dumps(_plain(value), ensure_ascii=False, indent=1, default=repr)
    if len(content) > _MAX_TARGET_CHARS:
        content = content[:_MAX_TARGET_CHARS] + "\n[... cut: the content is longer]"
    return (
        f"Criteria:\n{config.evaluation_criteria}\n\n"
        f"Content ({config.target_key}):\n{content}\n\n"
        "Score it from 0 to 1."
    )


_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(\s*%|\s*/\s*(\d+(?:\.\d+)?))?")


def parse_score(text: str) -> tuple[float | None, str]:
    """The score in 0..1 an evaluator's reply gives, and its reasoning (or why none).

    Tried in order: a JSON object with ``score`` (or ``rating``) and ``reasoning``; then
    the first number in the text, read as a fraction (``0.85``), a percentage (``85%``)
    or a ratio (``8.5/10``). A score outside 0..1 (or NaN) is no score.
    """
    reasoning = ""
    try:
        data = parse_json_object(text)
    except MalformedResponseError:
        data = None
    if data is not None:
        raw = data.get("score", data.get("rating"))
        why = data.get("reasoning", data.get("reason", ""))
        reasoning = why if isinstance(why, str) else json.dumps(why, default=repr)
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return _in_range(float(raw), reasoning)
        if isinstance(raw, str):
            text = raw
        else:
            return None, f"its JSON has no numeric score: {_short(data)}"
    match = _NUMBER.search(text)
    if match is None:
        return None, f"no number in {_short(text)}"
    number = float(match.group(1))
    suffix = match.group(2) or ""
    if suffix.strip() == "%":
        number /= 100.0
    elif match.group(3) is not None:
        denominator = float(match.group(3))
        if denominator == 0:
            return None, f"{match.group(0)!r} divides by zero"
        number /= denominator
    return _in_range(number, reasoning)


def _in_range(score: float, reasoning: str) -> tuple[float | None, str]:
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        return None, f"score {score:g} is outside 0..1"
    return score, reasoning
