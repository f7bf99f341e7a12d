"""What a replay found: :class:`ReplayReport` and its :class:`Divergence` entries."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["Divergence", "ReplayReport"]


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """One place where today's graph decides otherwise than the recorded run.

    ``seq`` is the recorded event's (for a new event the recorded run has no counterpart
    of, the seq of the recorded event in whose place it comes); ``kind`` is that event's
    tag (``"judge.verdict"``, ``"edge.taken"``, ...); ``recorded`` and ``now`` are the two
    events as builtins (None where one side has none); ``reason`` says it in words.
    """

    seq: int
    kind: str
    recorded: dict[str, Any] | None
    now: dict[str, Any] | None
    reason: str


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """The replay of run ``run_id`` against a graph (``graph_id``, ``graph_hash``).

    ``equal`` is true when nothing diverged and the replay reached the recorded run's
    end. ``divergences`` are in recorded order: the first one, then each later one that
    the replay could still follow (one per node, edge source or run lane: what follows a
    divergence in the same lane is its consequence). ``warnings`` do not make a run
    unequal (a request to the model that differs while its recorded answer is still
    served). ``not_redecided`` names what the replay served from the log because it may
    not import the code that decides it. ``stopped`` says why the replay could not go on
    (a model answer or a function outcome that was never recorded), None when it went to
    the end. ``model_calls`` counts the recorded answers served, ``live_calls`` the
    judges' calls ``rejudge`` made to a live model (they cost tokens).
    """

    run_id: str
    graph_id: str
    graph_hash: str
    equal: bool
    divergences: list[Divergence] = []
    warnings: list[str] = []
    not_redecided: list[str] = []
    stopped: str | None = None
    recorded_events: int = 0
    replayed_events: int = 0
    model_calls: int = 0
    live_calls: int = 0

    @property
    def first(self) -> Divergence | None:
        """The first divergence, if any."""
        return self.divergences[0] if self.divergences else None

    def summary(self) -> str:
        """A few lines for people: the verdict, then each divergence and warning."""
        if self.equal:
            head = f"run {self.run_id}: replays equal against graph {self.graph_id}"
        else:
            head = f"run {self.run_id}: diverges against graph {self.graph_id}"
        lines = [head]
        lines.extend(f"  seq {d.seq} [{d.kind}] {d.reason}" for d in self.divergences)
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        lines.extend(f"  warning: {w}" for w in self.warnings)
        lines.extend(f"  not decided again: {n}" for n in self.not_redecided)
        return "\n".join(lines)
