"""Workers: processes that execute runs submitted to a shared store by any process."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import anyio

from eventstore import EventStore

from ._config import OwnershipConfig, RecoveryConfig
from ._runtime import Runtime

__all__ = ["run_worker"]


async def run_worker(
    store: EventStore | str | os.PathLike[str],
    *,
    concurrency: int = 100,
    worker_id: str | None = None,
    lease_seconds: float = 15.0,
    poll_interval: float = 0.5,
    on_ready: Callable[[Runtime], None] | None = None,
    **runtime_options: Any,
) -> None:
    """Execute runs submitted to ``store`` (see :meth:`Runtime.submit`) until cancelled.

    A worker is a :class:`Runtime` with ``recovery`` (:class:`RecoveryConfig`): it claims
    runnable runs (new submissions, runs handed back with :meth:`Runtime.submit_resume`,
    and runs whose owner's lease expired) with the store's skip-locked claim, at most
    ``concurrency`` live at once, and resumes each from its log. It looks for runnable runs
    every ``poll_interval`` seconds (at once again while it finds as many as it has room
    for) and, on PostgreSQL, as soon as a NOTIFY says one was submitted or handed back.
    ``worker_id`` and ``lease_seconds`` are its :class:`OwnershipConfig`.
    ``runtime_options`` go to the Runtime (the functions, provider, tools and judges the
    graphs name). ``on_ready`` is called once the worker claims work. Cancelling the call
    stops the worker: its live runs stop and every claim it holds is released (those of
    runs it had claimed and not yet resumed included), so other workers take them at once.
    """
    async with Runtime(
        store,
        ownership=OwnershipConfig(worker_id=worker_id, lease_seconds=lease_seconds),
        recovery=RecoveryConfig(interval=poll_interval, concurrency=concurrency),
        **runtime_options,
    ) as runtime:
        if on_ready is not None:
            on_ready(runtime)
        await anyio.sleep_forever()
