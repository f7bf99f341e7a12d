"""The verifier node: check a value in memory, write a VerificationResult, route on it.

One :class:`VerifierNodeActor` per verifier node of a run. For each ``ExecuteNode`` it runs
the configured check (see ``runtime.spec._verifier``: an expression or a JSONPath
assertion from ``_verifier_checks``, or its own ``llm_judge`` evaluator call), records a
``VerificationRecorded`` event (the result, and for ``llm_judge`` the evaluator's reply and
token usage), and tells the executor ``NodeDone``:

- by default the node succeeds with two outputs, ``{result_key}`` (the result as a
  mapping) and ``{result_key}_passed`` (a boolean), and edges route on the boolean;
- with ``throw_on_fail`` a failed check fails the node (``error_type
  "VerificationFailed"``), so the retry policy and ``on_failure`` edges apply;
- an expression that cannot be evaluated, or an evaluator call that failed after the
  provider's own retries, fails the node (a check that could not run is not a verdict);
  a failed call that was paid for all the same (an answer that could not be read but
  said what it cost) is recorded with that failure (``node.failed``'s ``usage``).
  An evaluator's answer cut at the token cap is asked once more with a larger cap
  (``complete_uncut``); cut again, it is no result but was paid for: its
  ``VerificationRecorded`` (``stop`` "max_tokens", not passed, its tokens) is recorded,
  then the attempt fails with a TruncatedError (retryable), on a rerun of the attempt
  after a crash too, without asking again;
- an evaluator's reply with no score in 0..1 is a failed check (not passed), and one that
  did not run: its ``VerificationRecorded`` carries the reason as ``error``, which the
  fold counts as a judge failure (kind ``verify``).

Record before act: the result is committed before the node reports. An ``llm_judge``
attempt that finds its result already recorded (a crash after the evaluator answered)
reuses it and never asks the evaluator again. It looks in the run's live state (the
node's visit keeps its ``VerificationRecorded`` by attempt, see ``runtime.events._node_visit``),
never in the log, so an attempt costs the same however long the run is.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from actors import Actor, ActorRef

from .._errors import MalformedResponseError, ProviderError, TruncatedError
from ..engine._messages import ExecuteNode, NodeDone
from ..engine._runlog import RunLog
from ..events._catalogue import PaidUsage, VerificationRecorded
from ..events._tokens import spent, usage_fields
from ..providers._asked import asked_at
from ..providers._base import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    Usage,
    complete_uncut,
    parse_json_object,
    truncated,
)
from ..spec._model import GraphSpec, NodeSpec
from ..spec._verifier import (
    ExpressionVerifier,
    JsonPathVerifier,
    LlmJudgeVerifier,
    VerificationResult,
    VerifierSpec,
    result_keys,
)
from ._meter import Meter, MeteredProvider
from ._names import ProviderLookup
from ._verifier_checks import CheckFailed, now, plain, short, verify_expression, verify_jsonpath

__all__ = [
    "EVALUATOR_SYSTEM_PROMPT",
    "VerifierNodeActor",
    "evaluator_prompt",
    "parse_score",
]

#: Characters of the target shown to the evaluator (the rest is cut, and it is told so).
_MAX_TARGET_CHARS: Final = 40_000


EVALUATOR_SYSTEM_PROMPT: Final = (
    "You are a strict evaluator. Score the content against the criteria with a number "
    "from 0 (fails completely) to 1 (meets them fully). Answer with one JSON object: "
    '{"score": <number from 0 to 1>, "reasoning": "<one or two sentences>"}.'
)


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
            if recorded is None:
                recorded = await self._verify(message)
                await self.log.append([recorded])
            result = msgspec.convert(recorded.result, VerificationResult)
            if truncated(recorded.stop) is not None:  # recorded for its tokens: no result
                raise CheckFailed("TruncatedError", result.reasoning, retryable=True)
        except CheckFailed as failure:
            return self._done(
                message,
                error=str(failure),
                error_type=failure.error_type,
                retryable=failure.retryable,
                usage=failure.usage,
            )
        key, passed_key = result_keys(self.spec.id, config)
        if not result.passed and config.throw_on_fail:
            return self._done(
                message,
                error=f"verification failed: {result.reasoning}",
                error_type="VerificationFailed",
            )
        return message.succeeded({key: msgspec.to_builtins(result), passed_key: result.passed})

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
        usage: Usage | None = None
        model = ""
        stop: str | None = None
        error: str | None = None  # why the evaluator's reply is no score
        match config:
            case ExpressionVerifier():
                result = verify_expression(config, memory, self.goal)
            case JsonPathVerifier():
                result = verify_jsonpath(config, memory)
            case LlmJudgeVerifier():
                with asked_at(message.node_id, visit=message.visit, iteration=message.attempt):
                    result, reply, usage, model, stop, error = await self._judge(config, memory)
        return VerificationRecorded(
            node_id=message.node_id,
            visit=message.visit,
            attempt=message.attempt,
            branch=message.branch,
            passed=result.passed,
            result=msgspec.to_builtins(result),
            reply=reply,
            model=model,
            stop=stop,
            error=error,
            **usage_fields(usage),
        )

    async def _judge(
        self, config: LlmJudgeVerifier, memory: Mapping[str, Any]
    ) -> tuple[VerificationResult, str, Usage | None, str, str | None, str | None]:
        """The evaluator's result, reply, usage, model, stop, and why its reply is no
        score (None when it scored, or was not asked: nothing to evaluate, a reply cut)."""
        if config.target_key not in memory:
            result = VerificationResult(
                type="llm_judge",
                passed=False,
                reasoning=f"memory key {config.target_key!r} is not set: nothing to evaluate",
                threshold=config.pass_threshold,
                evaluated_at=now(),
            )
            return result, "", None, "", None, None
        provider = self.providers(config.evaluator)
        if provider is None:
            name = "the runtime's provider" if config.evaluator is None else repr(config.evaluator)
            raise CheckFailed("SpecError", f"evaluator {name} is not configured")
        request = LlmRequest(
            messages=[ChatMessage(role="user", content=evaluator_prompt(config, memory))],
            system=EVALUATOR_SYSTEM_PROMPT,
            model=config.model,
            max_tokens=512,
            temperature=0.0,
            json_response=True,
            purpose="verify",
        )
        meter = Meter()  # each call's tokens as it returns: a failed one's too
        try:
            response = await complete_uncut(MeteredProvider(provider, meter), request)
        except ProviderError as exc:
            cut = exc.response if isinstance(exc, TruncatedError) else None
            if not isinstance(cut, LlmResponse):
                raise CheckFailed(
                    type(exc).__name__,
                    f"the evaluator failed: {exc}",
                    retryable=True,
                    usage=spent(meter.usage, "verify"),
                ) from exc
            # Cut at the token cap twice: no score, but both calls were paid for. Recorded
            # (not passed, stop "max_tokens"), then the attempt fails (see _attempt).
            result = VerificationResult(
                type="llm_judge",
                passed=False,
                reasoning=f"the evaluator failed: {truncated(cut.stop)}",
                threshold=config.pass_threshold,
                evaluated_at=now(),
            )
            return result, cut.text, cut.usage, cut.model, cut.stop, None
        score, reasoning = parse_score(response.text)
        error: str | None = None
        if score is None:  # not passed, and a check that did not run: a judge failure
            error = f"the evaluator's reply has no score from 0 to 1 ({reasoning})"
            result = VerificationResult(
                type="llm_judge",
                passed=False,
                reasoning=error,
                threshold=config.pass_threshold,
                extracted_value=response.text,
                evaluated_at=now(),
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
                evaluated_at=now(),
            )
        return result, response.text, response.usage, response.model, None, error

    def _done(
        self,
        message: ExecuteNode,
        *,
        error: str,
        error_type: str,
        retryable: bool = True,
        usage: PaidUsage | None = None,
    ) -> NodeDone:
        # A check that could not run (a bad expression) fails the same way again.
        return message.failed(error, error_type, retryable=retryable, usage=usage)


# ------------------------------------------------------------------ the evaluator


def evaluator_prompt(config: LlmJudgeVerifier, memory: Mapping[str, Any]) -> str:
    """The user message the evaluator gets: the criteria, then the content."""
    value = memory[config.target_key]
    if isinstance(value, str):
        content = value
    else:
        content = json.dumps(plain(value), ensure_ascii=False, indent=1, default=repr)
    if len(content) > _MAX_TARGET_CHARS:
        content = content[:_MAX_TARGET_CHARS] + "\n[... cut: the content is longer]"
    return (
        f"Criteria:\n{config.evaluation_criteria}\n\n"
        f"Content ({config.target_key}):\n{content}\n\n"
        "Score it from 0 to 1."
    )


_NUMBER = re.compile(
    r"(?<![\w.])(-?\d+(?:\.\d+)?)(\s*%|\s*(?:/|\bout\s+of\b)\s*(\d+(?:\.\d+)?))?", re.IGNORECASE
)


def parse_score(text: str) -> tuple[float | None, str]:
    """The score in 0..1 an evaluator's reply gives, and its reasoning (or why none).

    Tried in order: a JSON object with ``score`` (or ``rating``) and ``reasoning``; then
    the first number in the text, read as a fraction (``0.85``), a percentage (``85%``)
    or a ratio (``8.5/10``, ``1 out of 10``). A score outside 0..1 (NaN, infinite, or
    an integer too large for a float) is no score.
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
            try:
                number = float(raw)
            except OverflowError:  # an int of hundreds of digits: no float holds it
                return None, f"score {short(raw)} is outside 0..1"
            return _in_range(number, reasoning)
        if isinstance(raw, str):
            text = raw
        else:
            return None, f"its JSON has no numeric score: {short(data)}"
    match = _NUMBER.search(text)
    if match is None:
        return None, f"no number in {short(text)}"
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
