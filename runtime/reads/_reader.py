"""The read model: what every front shows of runs, read from a store and checked.

:class:`RunReader` is the one place the CLI, the HTTP API and the dashboard read runs
from. Every read checks the hash chain of what it reads, at the cost of what it reads: a
state or a detail is a snapshot plus the events after it, checked from the snapshot's
seq to the run's last seq and hash (``verify`` alone reads the whole chain); an event
page checks the events it returns. A read of a broken log does not raise: it answers
what the log holds with ``chain.ok`` False and the reason, and the front decides (the CLI
exits 1, the HTTP API answers 200 with the chain status).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec

from eventstore import (
    CorruptLogError,
    Event,
    EventStore,
    HeadsFileContents,
    RunInfo,
    RunQuery,
    SnapshotTaken,
    UnknownEventError,
    VerifyReport,
    event_tag,
)

from .._errors import RunNotFoundError
from ..control._ownership import listed_ownership
from ..events._catalogue import RunFinished, RunPaused, RunStarted
from ..events._snapshots import check_snapshot, load_state
from ..events._state import RunState, fold
from ._audit import audited
from ._heads import HeadsCache, check_head
from ._listed import listed_row
from ._records import (
    ChainScope,
    ChainStatus,
    EventPage,
    EventRecord,
    NodeVerdicts,
    PauseView,
    RunDetail,
    RunList,
    RunReport,
    RunSummary,
    StallView,
    StateView,
    VerdictView,
)
from ._report import run_report
from ._shown import broken_chain, judge_failures, node_of, pause_view

__all__ = ["SCAN_EVENTS", "RunReader"]

#: Events one page of a run's events reads at most, whatever its filters.
SCAN_EVENTS = 10_000

_LOG_ERRORS = (CorruptLogError, UnknownEventError)
_FINISHED = ("completed", "failed")
#: Entries each of the reader's caches holds at most (it starts over when full).
_CACHE_LIMIT = 50_000


class RunReader:
    """Reads runs from one store for the fronts; keeps no run state (two small caches
    hold facts a log never changes: a run's graph and the body at a run's last seq).

    Every method raises RunNotFoundError for a run the store does not hold, and the
    store's errors (StoreClosedError, StoreFileError) when it cannot be read.
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._graphs: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
        self._last_bodies: dict[tuple[str, int], Any] = {}
        self._pauses: dict[tuple[str, int], PauseView | None] = {}
        self._heads = HeadsCache(store.heads_file)

    # -- the listing ----------------------------------------------------------------------

    async def list_runs(
        self, query: RunQuery | None = None, *, cursor: str | None = None, limit: int = 100
    ) -> RunList:
        """A page of the runs matching ``query``, newest first, after ``cursor``: each
        row's texts bounded as ``RunSummary`` and ``PauseView`` say (:meth:`detail` gives
        them whole). Raises ValueError for a cursor that no listing gave.
        """
        page = await self.store.query_runs(query or RunQuery(), cursor=cursor, limit=limit)
        rows = [listed_row(await self.summary(info)) for info in page.runs]
        return RunList(runs=rows, next_cursor=page.next_cursor)

    async def info(self, run_id: str) -> RunInfo:
        """The run's listing row; RunNotFoundError for a run the store does not hold."""
        info = await self.store.get_run(run_id)
        if info is None:
            raise RunNotFoundError(run_id)
        return info

    async def summary(self, info: RunInfo | str) -> RunSummary:
        """The run's row: status, graph and quality from the listing; why a paused run
        waits (its values bounded, as ``PauseView`` says) and why a run failed from its
        last event (read with its hash checked)."""
        if isinstance(info, str):
            info = await self.info(info)
        paused: PauseView | None = None
        error: str | None = None
        try:
            if info.status == "paused" or info.status in _FINISHED:
                last = await self._last(info)
                if isinstance(last, RunFinished):
                    error = last.error
                elif isinstance(last, RunPaused) and info.status == "paused":
                    paused = await self._paused(info)
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
            origin=info.origin,
            draining=info.draining,
            draining_since=info.draining_since,
        )

    async def _paused(self, info: RunInfo) -> PauseView | None:
        """Why the paused run waits, with what its memory holds as a listing's row carries
        it: a bounded part of the values (cached: one per seq)."""
        key = (info.run_id, info.last_seq)
        if key not in self._pauses:
            state = (await self.state(info.run_id)).state
            self._remember(self._pauses, key, pause_view(state, listed=True))
        view: PauseView | None = self._pauses[key]
        return view

    def _remember(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value

    async def _first(self, run_id: str) -> tuple[str | None, dict[str, Any] | None]:
        cached = self._graphs.get(run_id)
        if cached is not None:
            return cached
        found: tuple[str | None, dict[str, Any] | None] = (None, None)
        async for event in self.store.read(run_id, to_seq=1, verify=True):
            if isinstance(event.body, RunStarted):
                graph = event.body.graph
                graph_id = graph.get("id")
                found = (graph_id if isinstance(graph_id, str) else None, graph)
        if found[0] is not None:
            self._remember(self._graphs, run_id, found)
        return found

    async def _last(self, info: RunInfo) -> Any:
        """The body of the run's last event at ``info.last_seq`` but a ``snapshot.taken``
        (which may follow the event that paused or ended the run), cached: it never
        changes."""
        key = (info.run_id, info.last_seq)
        if key in self._last_bodies:
            return self._last_bodies[key]
        body: Any = None
        async for event in self.store.read(
            info.run_id, from_seq=max(1, info.last_seq - 1), to_seq=info.last_seq, verify=True
        ):
            if not isinstance(event.body, SnapshotTaken):
                body = event.body
        self._remember(self._last_bodies, key, body)
        return body

    # -- one run --------------------------------------------------------------------------

    async def state(self, run_id: str, *, at_seq: int | None = None) -> StateView:
        """The run's state (after event ``at_seq`` if given) and the check of the read.

        The read is the run's newest matching snapshot and the events after it, checked
        from the snapshot's seq to the run's last seq and hash (to ``at_seq`` for a time
        travel read). A broken chain gives the fold of what the log holds, unchecked, with
        ``chain.ok`` False. Raises ValueError for an ``at_seq`` below 1 or past the log.
        """
        if at_seq is not None and at_seq < 1:
            raise ValueError(f"at_seq must be 1 or more (seqs start at 1), got {at_seq}")
        try:
            state, folded, snapshot = await load_state(self.store, run_id, to_seq=at_seq)
            self._found(run_id, state, at_seq)
            # The heads at the seqs read and the newest around them, as a resume checks.
            missing = await self._heads.check_read(self.store, run_id, folded, snapshot.seq + 1)
            if missing is not None:
                raise CorruptLogError(run_id, *missing)
        except _LOG_ERRORS as exc:
            state = fold(await self.store.read_all(run_id, to_seq=at_seq))
            self._found(run_id, state, at_seq)
            return StateView(state=state, chain=broken_chain(exc, "full", 1, state.last_seq))
        # load_state read and checked the chain from the snapshot's own event on (from the
        # first without one).
        scope: ChainScope = "full" if snapshot.seq == 0 else "tail"
        chain = ChainStatus(
            ok=True, scope=scope, from_seq=max(1, snapshot.seq), to_seq=state.last_seq
        )
        return StateView(state=state, chain=chain)

    @staticmethod
    def _found(run_id: str, state: RunState, at_seq: int | None) -> None:
        if state.last_seq == 0:
            raise RunNotFoundError(run_id)
        if at_seq is not None and at_seq > state.last_seq:
            raise ValueError(f"at_seq {at_seq} is past the run's last event (seq {state.last_seq})")

    async def detail(self, run_id: str) -> RunDetail:
        """The run's folded state (as :meth:`state` reads it), each LLM node's newest
        verdicts and stalls included: the fold keeps them, so a long run costs what a
        short one does."""
        info = await self.info(run_id)
        view = await self.state(run_id)
        state = view.state
        llm_ids = [
            str(node.get("id"))
            for node in (state.graph or {}).get("nodes", [])
            if isinstance(node, dict) and node.get("kind") == "llm"
        ]
        for node_id in [*state.verdict_history, *state.stalls]:
            if node_id not in llm_ids:
                llm_ids.append(node_id)
        summary = await self.summary(info)
        if state.paused is not None and state.status == "paused":
            summary = msgspec.structs.replace(summary, paused=pause_view(state))
        summary = msgspec.structs.replace(
            summary, forked_from=state.forked_from, unrunnable=list(state.unrunnable)
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
            running=list(state.running),
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
                    tool_turns=state.tool_turns.get(node_id, 0),
                )
                for node_id in llm_ids
            ],
            edges_taken=list(state.edges_taken),
            event_counts=dict(state.event_counts),
            chain=view.chain,
            judge_failures=judge_failures(state),
        )

    async def report(self, run_id: str) -> RunReport:
        """The run for an auditor: reads the whole log and checks its whole chain, its
        snapshot and the heads recorded for it (as ``verify``); a broken chain is in
        ``chain``, never raised."""
        events, chain = await self._all(run_id)
        if not events:
            raise RunNotFoundError(run_id)
        # A forged snapshot, a log rechained or cut after a head was recorded: as verify says.
        chain = await audited(self.store, self._heads, run_id, events, chain)
        return run_report(events, chain, await self.store.get_run(run_id), self.store)

    async def _all(self, run_id: str) -> tuple[list[Event], ChainStatus]:
        """Every event of the run the log holds, and the check of the whole chain."""
        events: list[Event] = []
        chain: ChainStatus | None = None
        async for event, status in self.records(run_id):
            events.append(event)
            chain = status
        last = events[-1].seq if events else 0
        return events, chain or ChainStatus(ok=True, scope="full", from_seq=1, to_seq=last)

    async def records(self, run_id: str) -> AsyncIterator[tuple[Event, ChainStatus | None]]:
        """Every event the run's log holds, in seq order, each with None, and the last one
        with the check of the whole chain. A broken chain does not stop the read: the
        events from the break on are read unchecked (an edited one as it now reads), and
        the check says where it broke. An event that cannot be read at all ends it."""
        broken: ChainStatus | None = None
        last = 0
        pending: Event | None = None
        try:
            async for event in self.store.read(run_id, verify=True):
                if pending is not None:
                    yield pending, None
                pending, last = event, event.seq
        except _LOG_ERRORS as exc:
            broken = broken_chain(exc, "full", 1, last)
        if broken is not None:
            try:
                async for event in self.store.read(run_id, from_seq=last + 1):
                    if pending is not None:
                        yield pending, None
                    pending, last = event, event.seq
            except _LOG_ERRORS:
                pass  # the check already names the first break
            broken = msgspec.structs.replace(broken, to_seq=last)
        if pending is not None:
            yield pending, broken or ChainStatus(ok=True, scope="full", from_seq=1, to_seq=last)

    async def events(
        self,
        run_id: str,
        *,
        after: int = 0,
        limit: int = 100,
        nodes: Sequence[str] = (),
        types: Sequence[str] = (),
    ) -> EventPage:
        """Events after seq ``after`` of the run's node(s) ``nodes`` and tag(s) ``types``.

        A type ending in ``.`` or ``*`` matches a tag prefix (``llm.`` matches llm.turn).
        Reads the seq range the page needs and no more than SCAN_EVENTS events, with their
        chain checked: when the filters match fewer than ``limit`` of those, the page is
        short (maybe empty) and ``next_after`` says where to go on.
        """
        info = await self.info(run_id)
        try:
            return await self._page(info, after, limit, nodes, types, verify=True)
        except _LOG_ERRORS as exc:
            page = await self._page(info, after, limit, nodes, types, verify=False)
            chain = broken_chain(exc, "tail", after + 1, page.chain.to_seq)
            return msgspec.structs.replace(page, chain=chain)

    async def _page(
        self,
        info: RunInfo,
        after: int,
        limit: int,
        nodes: Sequence[str],
        types: Sequence[str],
        *,
        verify: bool,
    ) -> EventPage:
        prefixes = tuple(t.rstrip("*") for t in types if t.endswith(("*", ".")))
        exact = {t for t in types if not t.endswith(("*", "."))}
        wanted_nodes = set(nodes)
        picked: list[EventRecord] = []
        next_after: int | None = None
        scan_to = after + SCAN_EVENTS
        read_to = after
        async for event in self.store.read(
            info.run_id, from_seq=after + 1, to_seq=scan_to, verify=verify
        ):
            read_to = event.seq
            if types:
                tag = event_tag(event.body)
                if tag not in exact and not tag.startswith(prefixes or ("\0",)):
                    continue
            if wanted_nodes and not (node_of(event) & wanted_nodes):
                continue
            if len(picked) == limit:
                next_after = picked[-1].seq
                break
            picked.append(EventRecord.of(event))
        else:
            if scan_to < info.last_seq:
                next_after = scan_to
        chain = ChainStatus(ok=True, scope="tail", from_seq=after + 1, to_seq=read_to)
        return EventPage(events=picked, next_after=next_after, last_seq=info.last_seq, chain=chain)

    async def verify(self, run_id: str) -> VerifyReport:
        """The whole chain's check (the store's ``verify``), then the run's snapshot's: a
        snapshot not bound to the log by its ``snapshot.taken`` event, or that differs from
        the fold of the log through its seq, fails the run (``broken_at`` is its seq).
        Then every head of the run in the store's heads file, if it keeps one: the log must
        still hold each hash at its seq (a log rechained or cut after a head was recorded
        fails, even if extended since; ``broken_at`` is the head's seq). Never raises for a
        broken log."""
        report = await self.store.verify(run_id)
        if not report.ok:
            return report
        try:
            found = await check_snapshot(self.store, run_id)
        except _LOG_ERRORS as exc:
            return VerifyReport(run_id, False, report.checked, None, str(exc))
        if found is not None:
            seq, reason = found
            return VerifyReport(run_id, False, report.checked, seq, reason)
        missing = await self._heads.check(self.store, run_id)
        if missing is not None:
            return VerifyReport(run_id, False, report.checked, *missing)
        return report

    async def heads_file(self) -> HeadsFileContents | None:
        """The store's heads file (None when it keeps none): the heads its runs' owners
        recorded that link up, and the first line that does not. :meth:`verify` checks a
        run against its heads there; a front reports the file's own break once."""
        return await self._heads.contents()

    async def check_head(self, run_id: str, seq: int, hash: str) -> str | None:
        """Why a head kept elsewhere (an auditor's copy of ``magistrate heads``) is not in
        the log any more (the run is missing, its log ends before ``seq``, or holds
        another hash there), or None."""
        return await check_head(self.store, run_id, seq, hash)
