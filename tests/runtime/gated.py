"""A model that answers only when a test lets it: for cancelling, pausing and closing a run
while the executor waits on a model (an llm_decide choice, goal scoring)."""

from __future__ import annotations

import anyio

from runtime import LlmRequest, LlmResponse


class GatedProvider:
    """Answers ``answer`` to every request once ``release`` is set; ``asked`` is set by the
    first request, ``calls`` counts them."""

    name = "gated"

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked = anyio.Event()
        self.release = anyio.Event()
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        self.asked.set()
        await self.release.wait()
        return LlmResponse(text=self.answer)
