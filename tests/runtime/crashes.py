"""Helpers for tests that kill a process mid-run and resume its run in another."""

from __future__ import annotations

import anyio

from eventstore import RunOwnedError
from runtime import RunHandle, Runtime

#: The lease the killed scripts run with, so their claim expires soon after they die.
SHORT_LEASE = 0.2


async def resume_once_lease_expired(rt: Runtime, run_id: str, *, within: float = 10) -> RunHandle:
    """Resume ``run_id`` as soon as the killed owner's lease has expired."""
    with anyio.fail_after(within):
        while True:
            try:
                return await rt.resume(run_id)
            except RunOwnedError:  # the killed process's lease has not expired yet
                await anyio.sleep(0.05)
