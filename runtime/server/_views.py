"""What the API reads: run summaries, filtered run lists, event pages and run details.

Everything here is read from the store and folded on request; the server keeps no copy of
run state. Two caches hold facts that never change once written: a run's graph (its first
event) and a finished run's quality and error (its last event).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from eventstore import CorruptLogError, Event, EventStore, RunInfo, UnknownEventError, event_tag

from .._errors import RunNotFoundError
from .._events import EdgeTaken, RunFinished, RunPaused, RunStarted, StallDetected, Verdict
from .._state import fold
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

#: How many runs a filtered listing looks at, newest first. The store lists by status only;
#: the other filters are applied here, over at most this many candidates.
SCAN_LIMIT = 10_000

_LOG_ERRORS = (CorruptLogError, UnknownEventError)
_FINISHED = ("completed", "failed")
#: Entries each of the reader's caches holds at most (it starts over when full).
_CACHE_LIMIT = 50_000


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Filters of the runs list; ``created_after``/``created_before`` are Unix seconds."""

    status: str | None = None
    quality: str | None = None
    graph: str | None = None
    created_after: float | None = None
    created_before: float | None = None


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
        # A finished run's last event is final: its quality and error never change.
        self._finished: dict[str, tuple[str | None, str | None]] = {}

    def _remember(self, cache: dict[str, Any], run_id: str, value: Any) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[run_id] = value

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
        """The run's row: its status from the listing, graph and quality from its log."""
        quality: str | None = None
        paused: PauseView | None = None
        error: str | None = None
        graph_id: str | None = None
        try:
            graph_id, graph = await self._first(info.run_id)
            finished = self._finished.get(info.run_id)
            if finished is not None:
                quality, error = finished
            elif info.last_seq > 0:
                async for event in self.store.read(
                    info.run_id, from_seq=info.last_seq, to_seq=info.last_seq
                ):
                    body = event.body
                    if isinstance(body, RunFinished):
                        quality, error = body.quality, body.error
                        self._remember(self._finished, info.run_id, (quality, error))
                    elif isinstance(body, RunPaused) and info.status == "paused":
                        paused = PauseView(
                            reason=body.reason,
                            node_id=body.node_id,
                            waiting_for=_waiting_for(graph, body.node_id),
                        )
        except _LOG_ERRORS as exc:
            error = f"log unreadable: {exc}"
        return RunSummary(
            run_id=info.run_id,
            status=info.status,
            quality=quality,
            graph_id=graph_id,
            graph_hash=info.graph_hash,
            created=info.created,
            updated=info.updated,
            last_seq=info.last_seq,
            paused=paused,
            error=error,
        )

    async def list(self, filters: RunFilter, *, offset: int, limit: int) -> RunList:
        """Runs matching ``filters``, newest first, ``limit`` of them from ``offset``."""
        infos = await self.store.list_runs(status=filters.status, limit=SCAN_LIMIT)
        infos = [
            info
            for info in infos
            # Only a finished run has a quality.
            if (filters.quality is None or info.status in _FINISHED)
            and (filters.created_after is None or info.created >= filters.created_after)
            and (filters.created_before is None or info.created <= filters.created_before)
        ]
        rows: list[RunSummary] = []
        if filters.quality is None and filters.graph is None:
            for info in infos[offset : offset + limit]:
                rows.append(await self.summary(info))
            more = len(infos) > offset + limit
        else:
            matched = 0
            more = False
            for info in infos:
                row = await self.summary(info)
                if filters.quality is not None and row.quality != filters.quality:
                    continue
                if filters.graph is not None and filters.graph not in (
                    row.graph_id,
                    row.graph_hash,
                ):
                    continue
                matched += 1
                if matched <= offset:
                    continue
                if len(rows) == limit:
                    more = True
                    break
                rows.append(row)
        return RunList(runs=rows, offset=offset, next_offset=offset + limit if more else None)

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
        """
        info = await self.info(run_id)
        prefixes = tuple(t.rstrip("*") for t in types if t.endswith(("*", ".")))
        exact = {t for t in types if not t.endswith(("*", "."))}
        wanted_nodes = set(nodes)
        picked: list[EventView] = []
        next_after: int | None = None
        async for event in self.store.read(run_id, from_seq=after + 1):
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
        return EventPage(events=picked, next_after=next_after, last_seq=info.last_seq)

    async def detail(self, run_id: str) -> RunDetail:
        """The run folded from its whole log, with each LLM node's verdicts and stalls."""
        info = await self.info(run_id)
        events = await self.store.read_all(run_id)
        if not events:
            raise RunNotFoundError(run_id)
        state = fold(events)
        verdicts: dict[str, list[VerdictView]] = {}
        stalls: dict[str, list[StallView]] = {}
        counts: dict[str, int] = {}
        taken: dict[str, None] = {}
        for event in events:
            body = event.body
            tag = event_tag(body)
            counts[tag] = counts.get(tag, 0) + 1
            if isinstance(body, Verdict):
                verdicts.setdefault(body.node_id, []).append(
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
            elif isinstance(body, EdgeTaken):
                taken[f"{body.source}>{body.target}"] = None
            elif isinstance(body, StallDetected):
                stalls.setdefault(body.node_id, []).append(
                    StallView(seq=event.seq, iteration=body.iteration, signature=body.signature)
                )
        llm_ids = [
            str(node.get("id"))
            for node in (state.graph or {}).get("nodes", [])
            if isinstance(node, dict) and node.get("kind") == "llm"
        ]
        for node_id in [*verdicts, *stalls]:
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
                    verdicts=verdicts.get(node_id, []),
                    stalls=stalls.get(node_id, []),
                )
                for node_id in llm_ids
            ],
            edges_taken=list(taken),
            event_counts=counts,
        )
