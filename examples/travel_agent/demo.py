"""Run the travel agent once and print its timeline, read back from the event log."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TextIO

import msgspec

from eventstore import SqliteEventStore
from runtime import AnthropicProvider, LlmProvider, OpenAIProvider, Runtime
from runtime.events import fold, render_timeline

from .graph import FUNCTIONS, TRIP_REQUEST, build_graph
from .script import scripted_provider
from .tools import TOOLS

__all__ = ["DemoResult", "real_provider", "run_demo"]


class DemoResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one demo run produced, as read back from the store."""

    run_id: str
    db_path: str
    model: str
    status: str
    quality: str | None
    verified: bool
    lines: list[str]

    @property
    def ok(self) -> bool:
        """The run completed and its hash chain verified."""
        return self.status == "completed" and self.verified


class NoModelError(RuntimeError):
    """``--real`` was asked for but no API key is set."""


def real_provider() -> tuple[LlmProvider, str]:
    """OpenAI when ``OPENAI_API_KEY`` is set, else Anthropic with ``ANTHROPIC_API_KEY``.

    Raises NoModelError when neither is set. Model and base URL come from the usual
    environment variables (``OPENAI_MODEL``, ``ANTHROPIC_MODEL``, ...).
    """
    if os.environ.get("OPENAI_API_KEY"):
        openai = OpenAIProvider()
        return openai, f"openai {openai.model}"
    if os.environ.get("ANTHROPIC_API_KEY"):
        anthropic = AnthropicProvider()
        return anthropic, f"anthropic {anthropic.model}"
    raise NoModelError("--real needs OPENAI_API_KEY or ANTHROPIC_API_KEY in the environment")


async def run_demo(
    *, db_path: str | os.PathLike[str] | None = None, real: bool = False, out: TextIO | None = None
) -> DemoResult:
    """Run the graph once on a SQLite file, then print the timeline read back from it.

    ``db_path`` None uses a file in a temporary directory, removed afterwards. ``real``
    uses :func:`real_provider` instead of the scripted model. Blocks until the run ended
    and the log was re-read; raises NoModelError (``real`` without a key) and whatever
    the store raises.
    """
    stream = out if out is not None else sys.stdout
    async with AsyncExitStack() as stack:
        if db_path is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="travel_agent-"))
            path = Path(tmp) / "travel_agent.db"
        else:
            path = Path(db_path)
        if real:
            provider, model = real_provider()
            if isinstance(provider, OpenAIProvider | AnthropicProvider):
                await stack.enter_async_context(provider)
        else:
            provider, model = scripted_provider(), "scripted (offline)"
        async with Runtime(path, provider=provider, functions=FUNCTIONS, tools=TOOLS) as rt:
            handle = await rt.start(build_graph(), input={"request": TRIP_REQUEST})
            await handle.result()
        # The runtime is closed: what follows is read from the file alone.
        async with SqliteEventStore(path) as store:
            events = await store.read_all(handle.run_id)
            report = await store.verify(handle.run_id)
        lines = [
            f"Travel agent, run {handle.run_id}",
            f"model: {model}   store: SQLite {path}",
            "",
            *render_timeline(events, report),
        ]
        state = fold(events)
        itinerary = state.memory.get("itinerary")
        if isinstance(itinerary, str):
            lines += ["", "Itinerary (from memory, folded from the log):", *itinerary.splitlines()]
        for line in lines:
            print(line, file=stream)
        return DemoResult(
            run_id=handle.run_id,
            db_path=str(path),
            model=model,
            status=state.status,
            quality=state.quality,
            verified=report.ok,
            lines=lines,
        )
    raise AssertionError("unreachable")  # pragma: no cover - keeps mypy's flow analysis happy
