"""The tokens of the Level 2 judge's model calls, counted as each answer arrives.

The LLM node asks its judge (an actor) with a timeout, and stops it when it gives up:
the verdict the judge was working on never comes, and with it would go the tokens of
the calls it had already paid for (an attempt that answered nonsense, a cut answer asked
once more, an answer that arrived as the judge was being stopped). A :class:`Meter`
counts each call the moment it returns, so the node records them in the judge-failure
verdict all the same (``judge_actor.JudgeClient``).
"""

from __future__ import annotations

from .._errors import ProviderError
from ..events._tokens import add_usage, paid_usage
from ..providers._base import LlmProvider, LlmRequest, LlmResponse, Usage

__all__ = ["Meter", "MeteredProvider"]


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
    arrived counts nothing: its answer, and what it says it cost, never came."""

    __slots__ = ("meter", "name", "provider")

    def __init__(self, provider: LlmProvider, meter: Meter) -> None:
        self.provider = provider
        self.meter = meter
        self.name = provider.name

    async def complete(self, request: LlmRequest) -> LlmResponse:
        try:
            response = await self.provider.complete(request)
        except ProviderError as exc:
            self.meter.add(paid_usage(exc))
            raise
        self.meter.add(response.usage)
        return response
