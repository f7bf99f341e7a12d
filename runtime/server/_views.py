"""What the API reads: run summaries, filtered run lists, event pages and run details.

Everything here is read from the store and folded on request; the server keeps no copy of
run state. Run lists are the store's filtered, keyset-paged listings
(``EventStore.query_runs``). Two caches hold facts that never change once written: a run's
graph (its first event) and a run's last event at a given seq.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from eventstore import (
    CorruptLogError,
    Event,
    EventStore,
    RunInfo,
    RunQuery,
    UnknownEventError,
    event_tag,
)

from .._errors import RunNotFoundError
from .._ownership import listed_ownership
from ..events._catalogue import EdgeTaken, RunFinished, RunPaused, RunStarted
from ..events._snapshots import load_state
from ..events._state import fold
from ._schemas import (
    EventPage,
    EventView,
    NodeVerdicts,
    PauseView,
    RunDetail,
    RunList,
    RunSummary,
    StallView,
    VerdictView,
)

__all__ = ["RunFilter", "RunReader", "event_view"]

#: Events one page of a run's events reads at most, whatever its filters.
SCAN_EVENTS = 10_000

_LOG_ERRORS = (CorruptLogError, UnknownEventError)
_FINISHED = ("completed", "failed")
#: Entries each of the reader's caches holds at most (it starts over when full).
_CACHE_LIMIT = 50_000
#: A ``graph`` filter of this form names a graph hash; anything else, a graph id.
_GRAPH_HASH = re.compile(r"[0-9a-f]{64}")


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Filters of the runs list. ``graph`` is a graph id, or a graph hash (64 hex digits);
    ``created_after <= created < created_before`` in Unix seconds."""

    status: str | None = None
    quality: str | None = None
    graph: str | None = None
    created_after: float | None = None
    created_before: float | None = None

    def query(self) -> RunQuery:
        """The store's query for these filters."""
        graph = self.graph
        by_hash = graph is not None and _GRAPH_HASH.fullmatch(graph) is not None
        return RunQuery(
            status=self.status,
            quality=self.quality,
            graph_id=None if by_hash else graph,
            graph_hash=graph if by_hash else None,
            since=self.created_after,
            until=self.created_before,
        )


def event_view(event: Event) -> EventView:
    """An event as the API shows it (its body as builtins, tag included)."""
    body: dict[str, Any] = msgspec.to_builtins(event.body)
    return EventView(
        run_id=event.run_id,
        seq=event.seq,
        position=event.position,
        ts=event.ts,
        version=event.version,
        prev_hash=event.prev_hash,
        hash=event.hash,
        body=body,
    )


def _node_of(event: Event) -> set[str]:
    body = event.body
    if isinstance(body, EdgeTaken):
        return {body.source, body.target}
    node = getattr(body, "node_id", None) or getattr(body, "source", None)
    return {node} if isinstance(node, str) else set()


def _waiting_for(graph: dict[str, Any] | None, node_id: str | None) -> list[str]:
    # A paused node waits for the memory keys it reads: the approval form offers them.
    if graph is None or node_id is None:
        return []
    for node in graph.get("nodes", []):
        if isinstance(node, dict) and node.get("id") == node_id:
            keys = node.get("input_keys", [])
            return [str(k) for k in keys] if isinstance(keys, list) else []
    return []


class RunReader:
    """Reads runs for the API from one store."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._graph_ids: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
        # The body of a run's event at a seq: a log never changes what it holds.
        self._last_bodies: dict[tuple[str, int], Any] = {}

    def _remember(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value

    async def _first(self, run_id: str) -> tuple[str | None, dict[str, Any] | None]:
        cached = self._graph_ids.get(run_id)
        if cached is not None:
            return cached
        found: tuple[str | None, dict[str, Any] | None] = (None, None)
        async for event in self.store.read(run_id, to_seq=1):
            if isinstance(event.body, RunStarted):
                graph = event.body.graph
                graph_id = graph.get("id")
                found = (graph_id if isinstance(graph_id, str) else None, graph)
        if found[0] is not None:
            self._remember(self._graph_ids, run_id, found)
        return found

    async def summary(self, info: RunInfo) -> RunSummary:
        """The run's row: status, graph and quality from the listing; why a paused run
        waits and why a run failed from its last event."""
        paused: PauseView | None = None
        error: str | None = None
        try:
            if info.status == "paused" or info.status in _FINISHED:
                last = await self._last(info)
                if isinstance(last, RunFinished):
                    error = last.error
                elif isinstance(last, RunPaused) and info.status == "paused":
                    _, graph = await self._first(info.run_id)
                    paused = PauseView(
                        reason=last.reason,
                        node_id=last.node_id,
                        waiting_for=_waiting_for(graph, last.node_id),
                    )
        except _LOG_ERRORS as exc:
            error = f"log unreadable: {exc}"
        return RunSummary(
            run_id=info.run_id,
            status=info.status,
            owner=info.owner,
            ownership=listed_ownership(info, self.store),
            quality=info.quality,
            graph_id=info.graph_id,
            graph_hash=info.graph_hash,
            created=info.created,
            updated=info.updated,
            last_seq=info.last_seq,
            paused=paused,
            error=error,
        )

    async def _last(self, info: RunInfo) -> Any:
        """The body of the run's event at ``info.last_seq`` (cached: it never changes)."""
        key = (info.run_id, info.last_seq)
        if key in self._last_bodies:
            return self._last_bodies[key]
        body: Any = None
        async for event in self.store.read(
            info.run_id, from_seq=info.last_seq, to_seq=info.last_seq
        ):
            body = event.body
        self._remember(self._last_bodies, key, body)
        return body

    async def list(self, filters: RunFilter, *, cursor: str | None, limit: int) -> RunList:
        """A page of the runs matching ``filters``, newest first, after ``cursor``.

        Raises ValueError for a cursor that no listing gave.
        """
        page = await self.store.query_runs(filters.query(), cursor=cursor, limit=limit)
        rows = [await self.summary(info) for info in page.runs]
        return RunList(runs=rows, next_cursor=page.next_cursor)

    async def info(self, run_id: str) -> RunInfo:
        info = await self.store.get_run(run_id)
        if info is None:
            raise RunNotFoundError(run_id)
        return info

    async def events(
        self,
        run_id: str,
        *,
        after: int,
        limit: int,
        nodes: Sequence[str] = (),
        types: Sequence[str] = (),
    ) -> EventPage:
        """Events after seq ``after`` of the run's node(s) ``nodes`` and tag(s) ``types``.

        A type ending in ``.`` or ``*`` matches a tag prefix (``llm.`` matches llm.turn).
        Reads the seq range the page needs and no more than SCAN_EVENTS events: when the
        filters match fewer than ``limit`` of those, the page is short (maybe empty) and
        ``next_after`` says where to go on.
        """
        info = await self.info(run_id)
        prefixes = tuple(t.rstrip("*") for t in types if t.endswith(("*", ".")))
        exact = {t for t in types if not t.endswith(("*", "."))}
        wanted_nodes = set(nodes)
        picked: list[EventView] = []
        next_after: int | None = None
        scan_to = after + SCAN_EVENTS
        async for event in self.store.read(run_id, from_seq=after + 1, to_seq=scan_to):
            if types:
                tag = event_tag(event.body)
                if tag not in exact and not tag.startswith(prefixes or ("\0",)):
                    continue
            if wanted_nodes and not (_node_of(event) & wanted_nodes):
                continue
            if len(picked) == limit:
                next_after = picked[-1].seq
                break
            picked.append(event_view(event))
        else:
            if scan_to < info.last_seq:
                next_after = scan_to
        return EventPage(events=picked, next_after=next_after, last_seq=info.last_seq)

    async def detail(self, run_id: str) -> RunDetail:
        """The run's folded state (its newest matching snapshot plus the events after it,
        as ``Runtime.get_state`` reads it), each LLM node's newest verdicts and stalls
        included: the fold keeps them, so a long run costs what a short one does."""
        info = await self.info(run_id)
        try:
            state, _ = await load_state(self.store, run_id)
        except CorruptLogError:
            # An edited log: show what it says (``verify`` names where the chain breaks).
            state = fold(await self.store.read_all(run_id))
        if state.last_seq == 0:
            raise RunNotFoundError(run_id)
        llm_ids = [
            str(node.get("id"))
            for node in (state.graph or {}).get("nodes", [])
            if isinstance(node, dict) and node.get("kind") == "llm"
        ]
        for node_id in [*state.verdict_history, *state.stalls]:
            if node_id not in llm_ids:
                llm_ids.append(node_id)
        summary = await self.summary(info)
        if state.paused is not None and summary.paused is None and state.status == "paused":
            summary = msgspec.structs.replace(
                summary,
                paused=PauseView(
                    reason=state.paused.reason,
                    node_id=state.paused.node_id,
                    waiting_for=_waiting_for(state.graph, state.paused.node_id),
                ),
            )
        return RunDetail(
            summary=summary,
            graph=state.graph,
            goal=state.goal,
            goal_outcome=state.goal_outcome,
            input=state.input,
            memory=state.memory,
            path=state.path,
            current=[*state.running, *(p for p in state.pending if p not in state.running)],
            pending=state.pending,
            visit_counts=state.visit_counts,
            failed_nodes=state.failed_nodes,
            total_retries=state.total_retries,
            llm_nodes=[
                NodeVerdicts(
                    node_id=node_id,
                    verdicts=[
                        VerdictView(**msgspec.structs.asdict(v))
                        for v in state.verdict_history.get(node_id, ())
                    ],
                    stalls=[
                        StallView(**msgspec.structs.asdict(v))
                        for v in state.stalls.get(node_id, ())
                    ],
                    total_verdicts=sum(state.verdict_counts.get(node_id, {}).values()),
                )
                for node_id in llm_ids
            ],
            edges_taken=list(state.edges_taken),
            event_counts=dict(state.event_counts),
        )
