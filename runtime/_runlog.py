"""The append side of one run's event log, shared by the executor and the run's nodes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from eventstore import Event, EventBody, EventStore, NodeStarted, OutputSet, RunState, fold

__all__ = ["CommitHook", "RunLog"]

#: Called after each commit with (run_id, last committed seq, the bodies just committed).
CommitHook = Callable[[str, int, Sequence[EventBody]], Awaitable[None] | None]


class RunLog:
    """Numbers a run's events and appends them to the store in order.

    Sequence numbers are assigned synchronously when :meth:`append` is called, so several
    tasks of one run (its branches, its nodes) may append at once: the store commits their
    batches in submission order, and a batch that races a foreign writer fails with
    ConcurrencyError. ``store=None`` keeps the log in memory only (no durability).

    The log also tracks each running node's output accumulator (from OutputSet events), so
    a cancellation can flush partial outputs into memory.
    """

    def __init__(
        self,
        run_id: str,
        store: EventStore | None,
        *,
        last_seq: int = 0,
        hooks: Sequence[CommitHook] = (),
    ) -> None:
        self.run_id = run_id
        self.store = store
        self.last_seq = last_seq
        self.committed_seq = last_seq
        self.hooks = list(hooks)
        self.memory_events: list[EventBody] = []
        self.accumulators: dict[str, dict[str, Any]] = {}

    async def append(self, bodies: Sequence[EventBody]) -> int:
        """Append ``bodies`` as one atomic batch; return once committed (durable).

        Blocks on the store's group commit. Raises the store's errors (ConcurrencyError when
        another writer got there first). Cancellation after submission may still let the
        batch commit; the caller must then treat the run's state as unknown and re-read it.
        """
        if not bodies:
            return self.last_seq
        expected = self.last_seq
        self.last_seq += len(bodies)
        for body in bodies:
            self._track(body)
        if self.store is None:
            self.memory_events.extend(bodies)
        else:
            # Shielded: once submitted, a batch must be answered, or the next append's
            # expected_seq would be wrong; a commit takes milliseconds.
            with anyio.CancelScope(shield=True):
                await self.store.append(self.run_id, bodies, expected_seq=expected)
        self.committed_seq = max(self.committed_seq, expected + len(bodies))
        for hook in self.hooks:
            result = hook(self.run_id, expected + len(bodies), bodies)
            if result is not None:
                await result
        return expected + len(bodies)

    async def read_events(self) -> list[Event]:
        """Every committed event of the run, in order (reads the store)."""
        if self.store is None:
            return self.events()
        return await self.store.read_all(self.run_id)

    async def read_state(self) -> RunState:
        """The run's state as the fold of its committed log."""
        return fold(await self.read_events())

    def events(self, *, to_seq: int | None = None) -> list[Event]:
        """The in-memory log (``store=None``) as envelopes, for folding; no hash chain."""
        bodies = self.memory_events if to_seq is None else self.memory_events[:to_seq]
        return [
            Event(
                run_id=self.run_id,
                seq=i,
                position=i,
                ts=0.0,
                version=type(body).schema_version,
                prev_hash="",
                hash="",
                body=body,
            )
            for i, body in enumerate(bodies, start=1)
        ]

    def _track(self, body: EventBody) -> None:
        if isinstance(body, OutputSet):
            self.accumulators.setdefault(body.node_id, {})[body.key] = body.value
        elif isinstance(body, NodeStarted):
            self.accumulators[body.node_id] = {}
