"""The tokens of every model call the runtime makes, counted as each answer arrives, and
the one place a provider's answer is checked before anything records it.

Every call a node's turn, a parallel branch, the branch judge, the Level 2 judge, an
``llm_judge`` verifier, an ``llm_decide`` router or the goal's evaluator makes goes
through a :class:`MeteredProvider`, inside ``complete_uncut`` (so a cut answer and the
call asking once more are counted apart). Its caller may never see an answer whose
calls were paid for: the LLM node stops its judge (an actor) when it gives up waiting,
and a cut answer's re-ask may fail (a 5xx, a timeout) after the cut one was paid. A
:class:`Meter` counts each call the moment it returns, so the caller records them all
the same (the judge-failure verdict, the router's ``edge.taken``, ``run.finished``'s
``goal_*`` counts, a node's failure).

The built-in providers check what the API says a call cost; a provider of the user's
own reaches the log only through here, so here its answer is checked too (see
:func:`checked`): a run's log is an audit record and never holds a figure that cannot
be true, a negative token count or a latency that is not a number.
"""

from __future__ import annotations

import math
import time
from typing import Final

import msgspec

from .._errors import MalformedResponseError, ProviderError
from ..events._tokens import add_usage, paid_usage
from ..providers._base import LlmProvider, LlmRequest, LlmResponse, Usage, shown

__all__ = ["Meter", "MeteredProvider", "checked", "usage_problem"]

_COUNTS: Final = ("input_tokens", "output_tokens", "input_cached", "input_cache_write")


class Meter:
    """The tokens of the calls counted so far (``usage``; None: none had any)."""

    __slots__ = ("usage",)

    def __init__(self) -> None:
        self.usage: Usage | None = None

    def add(self, usage: Usage | None) -> None:
        self.usage = add_usage(self.usage, usage)


class MeteredProvider:
    """``provider``, each of whose calls ``meter`` counts as it returns: its answer's
    usage, or a failure's that was paid for (:func:`paid_usage`: a cut answer, an
    unreadable one whose usage could be read). A call cancelled before its answer
    arrived counts nothing: its answer, and what it says it cost, never came.

    Each answer is :func:`checked` first: one with a token count that cannot be true
    raises MalformedResponseError (counting nothing), as does a failure carrying one."""

    __slots__ = ("meter", "name", "provider")

    def __init__(self, provider: LlmProvider, meter: Meter) -> None:
        self.provider = provider
        self.meter = meter
        self.name = provider.name

    async def complete(self, request: LlmRequest) -> LlmResponse:
        started = time.perf_counter()
        try:
            response = await self.provider.complete(request)
        except ProviderError as exc:
            paid = paid_usage(exc)
            problem = None if paid is None else usage_problem(paid)
            if problem is not None:
                raise _refused(
                    self.name, f"the {type(exc).__name__} it raised has {problem}"
                ) from exc
            self.meter.add(paid)
            raise
        response = checked(self.name, response, started=started)
        self.meter.add(response.usage)
        return response


def usage_problem(usage: object) -> str | None:
    """Why ``usage`` cannot be what a call cost (it is no :class:`Usage`, or one of its
    counts is no whole number >= 0, which is what the built-in providers take from an
    API), or None."""
    if not isinstance(usage, Usage):
        return f"a usage of type {type(usage).__name__}, not a Usage"
    for name in _COUNTS:
        value = getattr(usage, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"usage.{name} = {shown(value)}, not a token count (a whole number >= 0)"
    return None


def checked(provider: str, response: object, *, started: float) -> LlmResponse:
    """``response``, which ``provider`` returned for a call begun at ``started`` (a
    ``time.perf_counter()`` reading), as the log may record it.

    - Not an :class:`LlmResponse`, or a token count that is no whole number >= 0:
      MalformedResponseError naming the provider and the field. What a call cost is the
      provider's to say; a count that cannot be true is refused, not mended into one no
      one reported (the built-in providers refuse such a count from an API the same way).
    - A ``latency_ms`` that is NaN, infinite, negative or no number: replaced by the time
      measured here since ``started``. It is the call's wall time, which the runtime can
      measure itself, so an answer is never thrown away for a clock's figure.
    """
    if not isinstance(response, LlmResponse):
        raise _refused(
            provider, f"complete() returned {type(response).__name__}, not an LlmResponse"
        )
    problem = usage_problem(response.usage)
    if problem is not None:
        raise _refused(provider, f"the answer has {problem}")
    latency = response.latency_ms
    if isinstance(latency, int | float) and not isinstance(latency, bool):
        if math.isfinite(latency) and latency >= 0:
            return response
    measured = (time.perf_counter() - started) * 1000.0
    return msgspec.structs.replace(response, latency_ms=measured)


def _refused(provider: str, problem: str) -> MalformedResponseError:
    return MalformedResponseError(provider, f"{problem}; fix the provider's complete()")
