"""Where a model request was asked from: a context variable the asking code sets.

A provider that serves recorded answers (the replay's) reads :func:`where_asked` to find
the answer recorded at the same place (node, visit, iteration, item) instead of relying
on the global order of calls, which a changed graph or concurrent branches reorder.
Every other provider ignores it. The LLM node sets it once per attempt (node, visit: its
turns are counted from there); the Level 2 judge, ``llm_decide`` edges, verifiers, goal
evaluators and parallel branches set it around their own call.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any, NamedTuple

__all__ = ["AskedAt", "asked_at", "where_asked"]


class AskedAt(NamedTuple):
    """The place of one request: the asking ``node`` (``"goal"`` for the goal's
    evaluator), its ``visit``, the turn ``iteration`` (the judged turn; a verifier's
    attempt; a branch's turn), and an ``item`` (a goal criterion's id; a parallel round and
    branch). None where the asker does not say."""

    node: str
    visit: int | None = None
    iteration: int | None = None
    item: str | None = None


_ASKED: ContextVar[AskedAt | None] = ContextVar("magistrate_asked_at", default=None)


class asked_at:
    """``with asked_at(node, visit=..., iteration=...):`` around a provider call."""

    __slots__ = ("_place", "_token")

    def __init__(
        self,
        node: str,
        *,
        visit: int | None = None,
        iteration: int | None = None,
        item: str | None = None,
    ) -> None:
        self._place = AskedAt(node, visit, iteration, item)
        self._token: Token[AskedAt | None] | None = None

    def __enter__(self) -> AskedAt:
        self._token = _ASKED.set(self._place)
        return self._place

    def __exit__(self, *exc_info: Any) -> None:
        if self._token is not None:
            _ASKED.reset(self._token)


def where_asked() -> AskedAt | None:
    """The place of the request being asked in this task, if its asker said."""
    return _ASKED.get()
