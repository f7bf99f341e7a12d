"""Opening a runtime's run control: the run logs over its store, the actor system its
runs' actors live in, the control of live runs and claims, and the tasks that keep them.

What ``Runtime.__aenter__`` builds; everything it opens is closed by ``stack``, in the
order that keeps the rules of :class:`RunControl` (claims are given up once the actor
system has stopped, and runs it could not stop are recorded then).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from actors import ActorSystem, MailboxConfig
from eventstore import EventStore

from .._config import OwnershipConfig, RecoveryConfig
from .._handle import RunHandle
from .._result import RunOutcome
from .._run_logs import RunLogs
from ..engine._runlog import CommitHook, CommitObserver
from ..observe._logging import log_run_events
from ._live_runs import LiveRuns
from ._ownership import RunOwnership
from ._run_control import RunControl

if TYPE_CHECKING:
    from ..observe._metrics import RuntimeMetrics

__all__ = ["open_control"]

#: Continues a run held here from its log (recovery, or another process appended).
Continue = Callable[[str, RunOutcome | None], Awaitable[RunHandle]]


async def open_control(
    stack: AsyncExitStack,
    store: EventStore | None,
    *,
    hooks: Sequence[CommitHook],
    metrics: RuntimeMetrics | None,
    mailbox: MailboxConfig | None,
    worker_id: str,
    ownership: OwnershipConfig,
    recovery: RecoveryConfig | None,
    continue_run: Continue,
) -> RunControl:
    """The run control of a runtime on ``store``, open until ``stack`` closes."""
    observers: list[CommitObserver] = [log_run_events]
    if metrics is not None:
        observers.append(metrics.observe)
        if store is not None:
            metrics.watch_store(store)
            # Last before the store closes: what it counted stays in the totals.
            stack.callback(metrics.unwatch_store, store)
    logs = RunLogs(
        store,
        hooks=hooks,
        observers=observers,
        snapshot_read=None if metrics is None else metrics.snapshot_read,
    )
    system = ActorSystem(default_mailbox=mailbox)
    control = RunControl(
        logs,
        LiveRuns(system, None if metrics is None else metrics.run_stopped),
        continue_run,
        ownership=RunOwnership.of(store, worker_id, ownership, recovery),
        recover_concurrency=None if recovery is None else recovery.concurrency,
        graph_seen=None if metrics is None else metrics.run_graph,
    )
    # Runs out first: claims are given up once the actor system has stopped.
    stack.push_async_callback(control.release_all)
    # Runs once the actor system has stopped (see Closing.cancel_live_runs).
    stack.push_async_callback(control.closing.record_unstopped)
    await stack.enter_async_context(system)
    if metrics is not None:
        system.start_task(metrics.watch_event_loop)
    await control.start_tasks(stack)
    return control
