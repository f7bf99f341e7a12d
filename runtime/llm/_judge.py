"""The judge's rules: the implicit cascade after every LLM turn, and the safety nets around
any judge.

After each turn of an LLM node, :func:`rule` renders ACCEPT, RETRY or ESCALATE (see
``_verdict``). Without a custom judge it runs the :class:`ImplicitJudge` cascade:

1. tool-call bail-out: the model made tool calls, so it is still working: RETRY, no check;
2. Level 0, structural: required (non-nullable) output keys missing: RETRY naming them;
   every key nullable and none set: RETRY (no empty completions); a client-facing node
   with no output keys never auto-accepts (it converses until max_iterations);
3. Level 2, quality: only with ``success_criteria`` and a provider: a separate model call
   (``purpose="judge"``, prompt :func:`quality_prompt`) answers
   ``{"verdict", "confidence", "feedback"}``; the verdict's ``usage`` counts every
   attempt's tokens (a failed but paid one's too: a TruncatedError's cut answer, an
   unreadable answer whose usage could be read), each as it arrives (``_meter``);
4. otherwise ACCEPT at level ``"structural"``.

Safety nets: a custom judge's ACCEPT with required keys missing is overridden to RETRY
(level ``"override"``, :func:`safety_net`); a judge that fails (a quality call failing
after ``retries`` immediate re-tries, a custom judge that raises or returns nonsense, a
judge that does not answer in time) follows :func:`judge_failure_verdict`: the cascade
without its quality check decides, with ``error`` set, or, when the node fails closed,
the verdict is ESCALATE carrying the error.

On a run's path the judge is an actor (``_judge_actor.JudgeActor``) that the LLM node
asks with a timeout; the actor runs :func:`consult` and :func:`safety_net`, and a judge
that raises or hangs is an actor failure the node turns into the judge-failure verdict,
which carries the tokens of the Level 2 calls that were paid for meanwhile.

The bail-out and structural paths allocate almost nothing (shared verdict constants, no
regex, no logging) because they run on every turn of every node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from .._errors import MalformedResponseError, ProviderError
from ..providers._asked import asked_at
from ..providers._base import (
    ChatMessage,
    LlmProvider,
    LlmRequest,
    Usage,
    complete_uncut,
    parse_json_object,
)
from ._meter import Meter, MeteredProvider, usage_problem
from ._verdict import (
    RECENT_MESSAGES,
    Action,
    JudgeContext,
    JudgeProtocol,
    JudgeVerdict,
    Level,
)

__all__ = [
    "ImplicitJudge",
    "consult",
    "describe",
    "judge_failure_verdict",
    "parse_quality_answer",
    "quality_prompt",
    "rule",
    "safety_net",
]


# Shared, immutable verdicts for the hot path.
_BAIL_OUT: Final = JudgeVerdict(action="retry", level="bail_out")
_STRUCTURAL_ACCEPT: Final = JudgeVerdict(action="accept", level="structural")
_CONVERSATION_NODE: Final = JudgeVerdict(action="retry", level="structural")


def _missing_keys_feedback(missing: Sequence[str]) -> str:
    return (
        f"Missing required output keys: {', '.join(missing)}. "
        "Call set_output(key, value) for each of them before finishing."
    )


def _structural(context: JudgeContext) -> JudgeVerdict | None:
    """Level 0: a RETRY verdict, or None when the structure is complete."""
    if context.missing_keys:
        return JudgeVerdict(
            action="retry",
            level="structural",
            feedback=_missing_keys_feedback(context.missing_keys),
        )
    expected = context.expected_keys
    if not expected:
        # A pure conversation node keeps talking until max_iterations (or shutdown); the
        # empty feedback tells the node there is nothing to inject: it waits for input.
        return _CONVERSATION_NODE if context.client_facing else None
    acc = context.accumulator
    nullable = context.nullable_keys
    if all(k in nullable for k in expected) and all(acc.get(k) is None for k in expected):
        return JudgeVerdict(
            action="retry",
            level="structural",
            feedback=(
                "No outputs have been set. Call set_output(key, value) for at least "
                f"one of: {', '.join(expected)}."
            ),
        )
    return None


_QUALITY_SYSTEM: Final = (
    "You are a strict quality judge for one step of an automated workflow. Decide whether "
    "the step's outputs meet every success criterion. Answer with one JSON object and "
    'nothing else: {"verdict": "ACCEPT" or "RETRY", "confidence": a number from 0 to 1, '
    '"feedback": "specific, actionable instructions for what to fix (empty when '
    'accepting)"}.'
)
_VALUE_CHARS: Final = 1000
_MESSAGE_CHARS: Final = 500
_VERDICT_WORD: Final = re.compile(r"\b(accept|retry)\b", re.IGNORECASE)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return _clip(value, _VALUE_CHARS)
    try:
        return _clip(msgspec.json.encode(value, order="sorted").decode(), _VALUE_CHARS)
    except (TypeError, msgspec.EncodeError):
        return _clip(repr(value), _VALUE_CHARS)


def quality_prompt(context: JudgeContext) -> str:
    """The user message of the Level 2 call: node, criteria, outputs, last 10 messages."""
    parts = [
        f"## Step\n{context.node_id}"
        + (f": {context.node_description}" if context.node_description else "")
    ]
    parts.append("## Success criteria\n" + "\n".join(f"- {c}" for c in context.success_criteria))
    if context.accumulator:
        outputs = "\n".join(
            f"- {key}: {_render_value(value)}" for key, value in context.accumulator.items()
        )
    else:
        outputs = "(none)"
    parts.append(f"## Outputs\n{outputs}")
    recent = context.recent_messages[-RECENT_MESSAGES:]
    if recent:
        lines = []
        for message in recent:
            text = _clip(message.content, _MESSAGE_CHARS)
            calls = ", ".join(call.name for call in message.tool_calls)
            if calls:
                text = f"{text} (called: {calls})" if text else f"(called: {calls})"
            lines.append(f"[{message.role}] {text}")
        parts.append(f"## Recent conversation (last {len(recent)} messages)\n" + "\n".join(lines))
    return "\n\n".join(parts)


def parse_quality_answer(text: str) -> JudgeVerdict | None:
    """Read the quality judge's answer; None when it cannot be understood.

    Prefers a JSON object ``{"verdict": "ACCEPT"|"RETRY", "confidence", "feedback"}``
    (verdict case-insensitive, confidence clamped to [0, 1], ignored when not a number).
    Failing that, plain text containing exactly one of the words ACCEPT / RETRY (any
    case) is that verdict, with the whole text as feedback for a RETRY.
    """
    try:
        data = parse_json_object(text)
    except MalformedResponseError:
        data = None
    if data is not None:
        raw = data.get("verdict")
        word = raw.strip().lower() if isinstance(raw, str) else ""
        if word in ("accept", "retry"):
            conf = data.get("confidence")
            confidence = None
            if isinstance(conf, int | float) and not isinstance(conf, bool) and conf == conf:
                # (NaN, which a JSON parser may take, says nothing: unknown, not 0)
                confidence = min(1.0, max(0.0, float(conf)))
            feedback = data.get("feedback")
            return JudgeVerdict(
                action="accept" if word == "accept" else "retry",
                level="quality",
                feedback=feedback.strip() if isinstance(feedback, str) else "",
                confidence=confidence,
            )
        return None
    words = {m.lower() for m in _VERDICT_WORD.findall(text)}
    if len(words) != 1:
        return None
    action: Action = "accept" if "accept" in words else "retry"
    stripped = text.strip()
    feedback = "" if action == "accept" or stripped.lower().strip(".! ") == action else stripped
    return JudgeVerdict(action=action, level="quality", feedback=feedback)


class ImplicitJudge:
    """The built-in cascade: bail-out, Level 0 structural, optional Level 2 quality.

    ``provider`` (and ``model``) serve the quality check; without a provider, passing
    Level 0 is enough. A quality call that raises :class:`ProviderError` (an answer cut
    at the token cap is asked once more with a larger cap, and a second cut is a
    TruncatedError: see ``complete_uncut``) or answers unintelligibly is re-tried
    ``retries`` times at once; if all attempts fail the
    verdict is ACCEPT with ``error`` set (graceful degradation: Level 0 already passed),
    or, with ``fail_closed=True``, ESCALATE with the error (the node fails; on_failure
    edges apply).
    """

    __slots__ = ("fail_closed", "model", "provider", "retries")

    def __init__(
        self,
        provider: LlmProvider | None = None,
        *,
        model: str | None = None,
        fail_closed: bool = False,
        retries: int = 2,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.provider = provider
        self.model = model
        self.fail_closed = fail_closed
        self.retries = retries

    async def evaluate(self, context: JudgeContext, *, meter: Meter | None = None) -> JudgeVerdict:
        """Run the cascade on one turn.

        Blocks only on the quality call (when it applies). Cancellation cancels that
        call. Raises nothing from provider failures (they become the verdict's
        ``error``); anything else a provider raises propagates. ``meter`` (a fresh one)
        counts the quality calls' tokens as each returns, so what they cost is known
        when no verdict comes; the verdict's ``usage`` is its count.
        """
        if context.turn_had_tool_calls:
            return _BAIL_OUT
        verdict = _structural(context)
        if verdict is not None:
            return verdict
        if context.success_criteria and self.provider is not None:
            meter = Meter() if meter is None else meter
            return await self._quality(context, self.provider, meter)
        return _STRUCTURAL_ACCEPT

    async def _quality(
        self, context: JudgeContext, provider: LlmProvider, meter: Meter
    ) -> JudgeVerdict:
        request = LlmRequest(
            messages=[ChatMessage(role="user", content=quality_prompt(context))],
            system=_QUALITY_SYSTEM,
            model=self.model,
            max_tokens=512,
            temperature=0.0,
            json_response=True,
            purpose="judge",
        )
        error = ""
        metered = MeteredProvider(provider, meter)
        for _ in range(self.retries + 1):
            try:
                with asked_at(context.node_id, iteration=context.iteration):
                    response = await complete_uncut(metered, request)
            except ProviderError as exc:  # TruncatedError too: a cut answer is no verdict
                error = f"{type(exc).__name__}: {exc}"
                continue
            verdict = parse_quality_answer(response.text)
            if verdict is not None:
                return msgspec.structs.replace(verdict, usage=meter.usage)
            error = f"unparseable judge answer: {_clip(response.text, 200)!r}"
        return self.failure_verdict(f"quality check failed: {error}", meter.usage)

    def failure_verdict(self, error: str, usage: Usage | None = None) -> JudgeVerdict:
        """The verdict when the quality check could not judge: ACCEPT, or ESCALATE when
        fail_closed (Level 0 has passed when the quality check runs); ``usage``: the
        tokens its failed calls cost."""
        if self.fail_closed:
            return msgspec.structs.replace(_escalation(error, "quality"), usage=usage)
        return JudgeVerdict(action="accept", level="quality", error=error, usage=usage)

    def without_quality(self, context: JudgeContext) -> JudgeVerdict:
        """The cascade without its Level 2 call: bail-out, structural, else ACCEPT."""
        if context.turn_had_tool_calls:
            return _BAIL_OUT
        return _structural(context) or _STRUCTURAL_ACCEPT


def _escalation(error: str, level: Level) -> JudgeVerdict:
    return JudgeVerdict(
        action="escalate",
        level=level,
        feedback=f"The judge failed and this node fails closed: {error}",
        error=error,
    )


def _action(word: object) -> Action | None:
    """``word`` as an action ("accept", " RETRY " ...), or None."""
    if isinstance(word, str):
        lowered = word.strip().lower()
        if lowered in ("accept", "retry", "escalate"):
            return lowered  # type: ignore[return-value]
    return None


def _normalise(result: object) -> JudgeVerdict:
    # A struct's fields are not checked when it is built: a verdict's action is, so the
    # log never holds one the catalogue cannot read back (Verdict.action is an Action).
    if isinstance(result, JudgeVerdict):
        action = _action(result.action)
        if action is None:
            raise TypeError(
                f"a custom judge returned the action {result.action!r}; expected "
                "accept, retry or escalate"
            )
        if not isinstance(result.feedback, str):
            raise TypeError(
                f"a custom judge returned the feedback {result.feedback!r}; expected text"
            )
        problem = None if result.usage is None else usage_problem(result.usage)
        if problem is not None:  # the log never holds a count that cannot be true
            raise TypeError(f"a custom judge returned {problem}; expected a Usage or None")
        confidence = _confidence(result.confidence)
        if result.level == "custom" and result.action == action:
            if confidence is result.confidence:
                return result
        return msgspec.structs.replace(result, action=action, level="custom", confidence=confidence)
    action = _action(result)
    if action is not None:
        return JudgeVerdict(action=action, level="custom")
    raise TypeError(f"a custom judge returned {result!r}; expected a JudgeVerdict or an action")


def _confidence(value: object) -> float | None:
    """A custom judge's confidence as the log keeps it: a number clamped to [0, 1], None for
    none or NaN (unknown, as the log writes it: the live state then equals the fold);
    TypeError for anything else (the log could not read it back)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a custom judge returned the confidence {value!r}; expected a number")
    if value != value:
        return None
    clamped = min(1.0, max(0.0, float(value)))
    return value if clamped == value and type(value) is float else clamped


async def consult(
    context: JudgeContext,
    *,
    judge: JudgeProtocol | None,
    implicit: ImplicitJudge,
    meter: Meter | None = None,
) -> JudgeVerdict:
    """Ask the judge for its verdict, as it gives it: the custom ``judge`` (at level
    ``"custom"``) or else the implicit cascade, its quality calls counted by ``meter``
    (a custom judge's own calls are known only from the usage of its verdict). No
    safety net is applied.

    Blocks on the judge; cancellation propagates. Raises whatever the judge raises, and
    TypeError when a custom judge returns something that is not a verdict.
    """
    if judge is None:
        return await implicit.evaluate(context, meter=meter)
    return _normalise(await judge.evaluate(context))


def safety_net(context: JudgeContext, verdict: JudgeVerdict) -> JudgeVerdict:
    """The ACCEPT override: an ACCEPT while required keys are missing becomes RETRY at
    level ``"override"`` naming the keys; any other verdict is returned as is."""
    if verdict.action == "accept" and context.missing_keys:
        return JudgeVerdict(
            action="retry",
            level="override",
            feedback=_missing_keys_feedback(context.missing_keys),
            confidence=verdict.confidence,
            usage=verdict.usage,  # the calls the overridden ACCEPT cost
        )
    return verdict


def judge_failure_verdict(
    context: JudgeContext,
    error: str,
    *,
    implicit: ImplicitJudge,
    custom: bool,
    usage: Usage | None = None,
) -> JudgeVerdict:
    """The verdict when the judge itself failed (raised, hung, answered nonsense).

    Fail-open (the default): the cascade without its quality call decides (a turn with
    tool calls goes on, missing keys are asked for, else ACCEPT), with ``error`` set, so
    a broken judge neither stops the run nor accepts incomplete work. Fail-closed
    (``implicit.fail_closed``): ESCALATE with the error, so the node fails. ``usage``:
    the tokens of the calls the failed judge paid for (recorded with the verdict).
    """
    level: Level = "custom" if custom else "quality"
    if implicit.fail_closed:
        return msgspec.structs.replace(_escalation(error, level), usage=usage)
    fallback = implicit.without_quality(context)
    return msgspec.structs.replace(fallback, error=error, usage=usage)


async def rule(
    context: JudgeContext, *, judge: JudgeProtocol | None, implicit: ImplicitJudge
) -> JudgeVerdict:
    """The verdict for one turn, safety nets applied, in the caller's task.

    :func:`consult`, then :func:`safety_net`; a judge that raises (or returns something
    that is not a verdict) gives :func:`judge_failure_verdict`, whose ``error`` records
    the failure. (The LLM node asks a :class:`JudgeActor` instead, with a timeout.)
    Blocks on the judge; cancellation propagates.
    """
    meter = Meter()
    try:
        verdict = await consult(context, judge=judge, implicit=implicit, meter=meter)
    except Exception as exc:  # recorded in the verdict (and so in the log), not swallowed
        error = f"{'custom ' if judge is not None else ''}judge failed: {describe(exc)}"
        custom = judge is not None
        return judge_failure_verdict(
            context, error, implicit=implicit, custom=custom, usage=meter.usage
        )
    return safety_net(context, verdict)


def describe(exc: BaseException) -> str:
    """``"Type: message"`` for an error recorded in a verdict."""
    return f"{type(exc).__name__}: {exc}"
