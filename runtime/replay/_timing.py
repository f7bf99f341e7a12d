"""What came into a recorded run while it ran, made to happen again at the same point of
the replay's log: input injected mid-run (:class:`Injections`), and the order in which an
LLM node's parallel branches finished (:class:`BranchFinishes`), which a ``first_success``
round (and a custom strategy) goes by.

The driver's commit hook hands each batch the replay commits to both. An injection is
due once the replay's log has every lane (``_lanes``) as far as the recorded log had it
before the injection; it is told to the run's executor from that hook, in the task that
committed the batch, before anything else can happen: whatever the run does next (a node
telling it is done, and the edges its end fires) comes after it in the executor's
mailbox, as in the recorded run. A function node's outcome recorded after an injection
not made yet makes it first (concurrent branches may reach the point in another order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import msgspec

from eventstore import Event, EventBody

from ..events._catalogue import BranchFinished
from ._lanes import LaneCounter, lane_counts

__all__ = ["BranchFinishes", "Injection", "Injections"]


class Injection(msgspec.Struct, frozen=True):
    """Input injected while the run ran: its recorded seq and data, and the events each
    lane of the recorded log had before it (the point to inject it again at)."""

    seq: int
    data: dict[str, Any]
    after: dict[str, int]


class Injections:
    """The recorded run's mid-run injections, each due once the replay's log has every
    lane as far as the recorded log had it before the injection."""

    def __init__(self, events: Sequence[Event], injected: Sequence[tuple[int, dict[str, Any]]]):
        points = lane_counts([(e.seq, e.body) for e in events], [seq for seq, _ in injected])
        self.pending = deque(
            Injection(seq, data, after) for (seq, data), after in zip(injected, points, strict=True)
        )
        self.missed: list[Injection] = []
        #: Injects into the replay's run (the driver's, once its runtime is open).
        self.tell: Callable[[Injection], Awaitable[None]] | None = None
        self._lanes = LaneCounter()

    def due(self, bodies: Sequence[EventBody]) -> list[Injection]:
        """The injections due once ``bodies`` are committed, in recorded order."""
        if not self.pending:
            return []
        self._lanes.add(bodies)
        due: list[Injection] = []
        while self.pending and self._lanes.reached(self.pending[0].after):
            due.append(self.pending.popleft())
        return due

    async def before(self, at: int) -> None:
        """Before an answer recorded at seq ``at`` is given: make the injections recorded
        before it that are not made yet."""
        while self.pending and self.pending[0].seq < at and self.tell is not None:
            await self.tell(self.pending.popleft())

    def warnings(self) -> list[str]:
        """One warning for each injection not made again (its point was never reached,
        or the run was no longer running there)."""
        return [
            f"the input injected at seq {i.seq} ({', '.join(sorted(i.data))}) was not "
            "injected again: the replay never got to where the recorded run took it in"
            for i in sorted([*self.missed, *self.pending], key=lambda i: i.seq)
        ]


class BranchFinishes:
    """The recorded finish order of each parallel round (node, visit, round): a branch's
    last recorded answer is given only once the branches recorded as finished before it,
    which today's node still has (``branches(node)`` of them), have finished here."""

    def __init__(
        self,
        recorded: dict[tuple[str, int, int], list[tuple[int, int]]],
        branches: Callable[[str], int],
    ) -> None:
        self.recorded = recorded
        self.branches = branches
        self._finished: dict[tuple[str, int, int, int], anyio.Event] = {}

    def _event(self, key: tuple[str, int, int, int]) -> anyio.Event:
        event = self._finished.get(key)
        if event is None:
            event = self._finished[key] = anyio.Event()
        return event

    def seen(self, bodies: Sequence[EventBody]) -> None:
        if not self.recorded:
            return
        for body in bodies:
            if isinstance(body, BranchFinished):
                self._event((body.node_id, body.visit, body.round, body.branch)).set()

    async def before_answer(self, node: str, visit: int, item: str, turn: int) -> None:
        """Before branch ``item`` (``"round/branch"``) of ``node`` gets its answer for
        ``turn``: if that is the last the branch was asked in the record (the one it
        finished after, or failed on), wait for the branches that finished before it."""
        round_, _, index = item.partition("/")
        if not (round_.isdigit() and index.isdigit()):
            return
        key = (node, visit, int(round_))
        order = self.recorded.get(key, [])
        branch = int(index)
        earlier: list[int] = []
        for other, turns in order:
            if other == branch:
                if turn < turns:
                    return  # not its last answer: it goes on
                for before in earlier:
                    if before < self.branches(node):
                        await self._event((*key, before)).wait()
                return
            earlier.append(other)
