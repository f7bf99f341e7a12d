"""Runs kept "draining" while an abandoned attempt of theirs still runs in this process.

A plain-def node runs in a thread the runtime cannot interrupt: a cancel (or a stop from
settling) abandons the thread, which runs on while its code does (fenced: it records
nothing). Every such thread is counted here while it runs (from its start: a cancel's
result may be delivered before the abandoned attempt has even seen its cancellation). A
run whose executor stopped while one still runs is draining here: the runtime keeps the
run's claim (so a resume or a worker elsewhere is refused, see
:class:`runtime.RunDrainingError`), and a resume in this process waits for the drain, at
most :data:`DRAIN_WAIT` seconds, so that two attempts of a node never run at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio

from eventstore import RunOwnedError

from .._errors import RunDrainingError
from .._run_logs import RunLogs
from ._ownership import RunOwnership

__all__ = ["DRAIN_WAIT", "Draining", "claim_to_resume"]

#: How long a resume in the draining process waits for the abandoned attempts to end.
DRAIN_WAIT: Final = 30.0


class _Drain:
    __slots__ = ("count", "ended")

    def __init__(self) -> None:
        self.count = 0
        self.ended = anyio.Event()


class Draining:
    """The runs of this process with abandoned attempts still running, by run id;
    ``on_drained(run_id)`` once a run's last one ended."""

    def __init__(self, on_drained: Callable[[str], None]) -> None:
        self._runs: dict[str, _Drain] = {}
        self._on_drained = on_drained

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def begin(self, run_id: str) -> Callable[[], None]:
        """A thread of ``run_id`` starts: counted until the returned callable is called
        (on the loop, when the thread's call ends)."""
        drain = self._runs.get(run_id)
        if drain is None:
            drain = self._runs[run_id] = _Drain()
        drain.count += 1
        done = False

        def end() -> None:
            nonlocal done
            if done:
                return
            done = True
            drain.count -= 1
            if drain.count == 0:
                drain.ended.set()
                if self._runs.get(run_id) is drain:
                    del self._runs[run_id]
                self._on_drained(run_id)

        return end

    async def wait(self, run_id: str, timeout: float = DRAIN_WAIT) -> bool:
        """Wait until ``run_id`` has drained (at most ``timeout`` seconds); True if it has."""
        drain = self._runs.get(run_id)
        if drain is None:
            return True
        with anyio.move_on_after(timeout):
            await drain.ended.wait()
        return drain.ended.is_set()


async def claim_to_resume(ownership: RunOwnership, logs: RunLogs, run_id: str) -> None:
    """Claim a run to resume it here; a run that is not running whose claim another
    process holds is draining there (RunDrainingError says so; RunOwnedError for a run
    live elsewhere)."""
    try:
        await ownership.claim(run_id)
    except RunOwnedError as exc:
        state = await logs.get_state(run_id)
        if state.status == "running":
            raise
        why = (
            f"its claim is still held by {exc.owner!r}, where an abandoned attempt of a "
            "node may still run; it can be resumed once that ends"
        )
        raise RunDrainingError(run_id, state.status, why) from exc
