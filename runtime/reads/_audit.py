"""What a whole-log read (``RunReader.report``: ``magistrate show``) adds to its chain
check, so that it says what ``verify`` says (the dashboard shows that): the run's snapshot
bound to the log and equal to its fold, then every head recorded for the run."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from eventstore import CorruptLogError, Event, EventStore, UnknownEventError

from ..events._snapshots import check_snapshot
from ._heads import HeadsCache
from ._records import ChainStatus

__all__ = ["audited"]


async def audited(
    store: EventStore,
    heads: HeadsCache,
    run_id: str,
    events: Sequence[Event],
    chain: ChainStatus,
) -> ChainStatus:
    """``chain`` (the check of the whole of ``events``, the run's log), failed where
    ``verify`` fails the run: at an edited, inserted or wrongly folded snapshot, then at a
    recorded head the log no longer holds (rechained or cut after it was recorded)."""
    if not chain.ok:
        return chain
    try:
        found = await check_snapshot(store, run_id, events)  # no second read
    except (CorruptLogError, UnknownEventError) as exc:
        return msgspec.structs.replace(chain, ok=False, reason=str(exc))
    if found is None:
        found = await heads.check(store, run_id, events)
    if found is None:
        return chain
    seq, why = found
    return msgspec.structs.replace(chain, ok=False, broken_at=seq, reason=why)
