"""A run's judged history for its detail page: verdicts and stalls per node, edges taken and
event counts, kept up to date by reading only the events appended since the last request.

A :class:`RunDigest` is a derived cache of the log: it records the seq and hash of the last
event it took in, and is rebuilt from the first event when the log does not continue from
there. Dropping it changes no answer, only how much of the log the next request reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import anyio

from eventstore import Event, EventStore, event_tag

from .._events import EdgeTaken, StallDetected, Verdict
from ._schemas import StallView, VerdictView

__all__ = ["DigestCache", "RunDigest"]

#: Verdicts (and stall warnings) of one node a digest keeps, the newest; totals stay exact.
KEEP_PER_NODE = 500
#: Runs whose digest the cache keeps (the least recently used one goes first).
CACHED_RUNS = 128


class RunDigest:
    """What a run's detail shows beyond its folded state, as of event ``last_seq``."""

    def __init__(self) -> None:
        self.last_seq = 0
        self.last_hash = ""
        self.verdicts: dict[str, deque[VerdictView]] = {}
        self.verdict_totals: dict[str, int] = {}
        self.stalls: dict[str, deque[StallView]] = {}
        self.counts: dict[str, int] = {}
        self.taken: dict[str, None] = {}
        self.lock = anyio.Lock()

    def take(self, event: Event) -> None:
        """Take in the run's next event."""
        body = event.body
        tag = event_tag(body)
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if isinstance(body, Verdict):
            kept = self.verdicts.setdefault(body.node_id, deque(maxlen=KEEP_PER_NODE))
            kept.append(
                VerdictView(
                    seq=event.seq,
                    iteration=body.iteration,
                    action=body.action,
                    level=body.level,
                    feedback=body.feedback,
                    confidence=body.confidence,
                    error=body.error,
                )
            )
            self.verdict_totals[body.node_id] = self.verdict_totals.get(body.node_id, 0) + 1
        elif isinstance(body, EdgeTaken):
            self.taken[f"{body.source}>{body.target}"] = None
        elif isinstance(body, StallDetected):
            self.stalls.setdefault(body.node_id, deque(maxlen=KEEP_PER_NODE)).append(
                StallView(seq=event.seq, iteration=body.iteration, signature=body.signature)
            )
        self.last_seq = event.seq
        self.last_hash = event.hash


class DigestCache:
    """Digests of recently shown runs, each brought up to a requested seq on demand."""

    def __init__(self, store: EventStore, capacity: int = CACHED_RUNS) -> None:
        self.store = store
        self.capacity = capacity
        self._digests: dict[str, RunDigest] = {}

    async def digest(self, run_id: str, upto: int, known: Sequence[Event] = ()) -> RunDigest:
        """The run's digest as of at least seq ``upto`` (reads the events after the cached
        one; the whole log the first time, or when the log does not continue it).

        ``known`` are consecutive events of the run the caller has read already (a
        fold's tail): those the digest needs are taken from there instead of the store.
        Raises CorruptLogError / UnknownEventError as the store's read does.
        """
        digest = self._digests.pop(run_id, None) or RunDigest()
        self._digests[run_id] = digest  # most recently used last
        while len(self._digests) > self.capacity:
            del self._digests[next(iter(self._digests))]
        async with digest.lock:
            if digest.last_seq >= upto:
                return digest
            fresh = digest
            if known and known[0].seq <= digest.last_seq + 1 <= known[-1].seq:
                for event in known[digest.last_seq + 1 - known[0].seq :]:
                    if event.prev_hash != digest.last_hash or event.seq > upto:
                        break
                    digest.take(event)
            async for event in self.store.read(run_id, from_seq=digest.last_seq + 1, to_seq=upto):
                if fresh is digest and event.prev_hash != digest.last_hash:
                    fresh = RunDigest()  # not the log it was built from: start over
                    break
                digest.take(event)
            if fresh is not digest:
                async for event in self.store.read(run_id, to_seq=upto):
                    fresh.take(event)
                self._digests[run_id] = fresh
            return fresh
