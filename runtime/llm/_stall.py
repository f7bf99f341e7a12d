"""Stall detection: the same tool calls with identical arguments on consecutive turns.

The judge seed's safety net: when an LLM node makes the same set of tool calls with the
same arguments on ``threshold`` (default 3) consecutive turns, it is spinning. The node
loop then injects a warning (or, for a client-facing node, asks the user for input) and
records a ``StallDetected`` event carrying :func:`signature` of the repeated turn.

The detector is a small fold over the tool calls of each turn, so it is restorable from
the event log with :meth:`StallDetector.from_history`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import msgspec

__all__ = ["StallDetector", "ToolCallLike", "signature"]


class ToolCallLike(Protocol):
    """Anything with a tool name and its arguments (``ToolCall``, a logged tool call...)."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Mapping[str, Any]: ...


_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _canonical_arguments(arguments: Mapping[str, Any]) -> str:
    try:
        return _encode_sorted(arguments).decode()
    except (TypeError, msgspec.EncodeError):
        # Arguments that are not JSON (a host app built them by hand): repr is still a
        # deterministic enough fingerprint for "identical".
        return repr(sorted(arguments.items(), key=lambda item: item[0]))


def _arguments_of(call: ToolCallLike) -> str:
    raw = getattr(call, "raw_arguments", None)
    if isinstance(raw, str):
        return _encode_sorted(raw).decode()
    return _canonical_arguments(call.arguments)


def signature(tool_calls: Sequence[ToolCallLike]) -> str:
    """The canonical, order-insensitive fingerprint of one turn's tool calls.

    Each call becomes ``[name, arguments]`` with its arguments as JSON with sorted keys
    (a call whose arguments were no JSON object, ``raw_arguments``: that text as a JSON
    string, so two different unreadable calls are not the same ``{}``); the calls are
    sorted, so the order in which the model listed them does not matter (a call repeated
    within the turn counts twice). The result is a JSON array, e.g.
    ``[["fetch",{"url":"a"}],["search",{"q":"x"}]]``; ``""`` for a turn with no calls.
    """
    if not tool_calls:
        return ""
    parts = sorted((_encode_sorted(call.name).decode(), _arguments_of(call)) for call in tool_calls)
    return "[" + ",".join(f"[{name},{args}]" for name, args in parts) + "]"


class StallDetector:
    """Counts consecutive turns whose tool calls have the same :func:`signature`.

    :meth:`observe` returns True on the turn that makes ``threshold`` identical turns in a
    row (the 3rd, by default). The count then restarts, so a model that keeps repeating
    itself is flagged again every ``threshold`` turns (the 6th, 9th... identical turn),
    not on every turn after the 3rd: each detection injects one warning, and the model
    gets ``threshold`` turns to react before the next. A turn with no tool calls (the
    model answered in text) resets the count, as does a turn with a different signature.
    """

    __slots__ = ("_count", "_last", "threshold")

    #: :func:`signature`, reachable from the class for callers that import only it.
    signature = staticmethod(signature)

    def __init__(self, threshold: int = 3) -> None:
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1, got {threshold}")
        self.threshold = threshold
        self._last = ""
        self._count = 0

    @classmethod
    def from_history(
        cls, turns: Iterable[Sequence[ToolCallLike]], *, threshold: int = 3
    ) -> StallDetector:
        """A detector in the state it reaches after observing ``turns`` (oldest first).

        Feed it the tool calls of the node's recorded turns to resume detection exactly
        where a crashed or paused run left off.
        """
        detector = cls(threshold)
        for calls in turns:
            detector.observe(calls)
        return detector

    @property
    def count(self) -> int:
        """How many consecutive identical turns have been seen since the last reset."""
        return self._count

    @property
    def last_signature(self) -> str:
        """The signature of the last observed turn (``""`` after a turn without calls)."""
        return self._last

    def observe(self, tool_calls: Sequence[ToolCallLike]) -> bool:
        """Record one turn's tool calls; True when this turn completes a stall."""
        if not tool_calls:
            self._last = ""
            self._count = 0
            return False
        sig = signature(tool_calls)
        if sig == self._last:
            self._count += 1
        else:
            self._last = sig
            self._count = 1
        if self._count >= self.threshold:
            self._count = 0
            return True
        return False

    def reset(self) -> None:
        """Forget the history (e.g. after the user answered a stalled client-facing node)."""
        self._last = ""
        self._count = 0
