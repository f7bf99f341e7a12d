"""Run ownership for a Runtime: claims, lease renewal, foreign control events, recovery.

A runtime whose store records ownership (:class:`eventstore.ClaimingStore`) claims every
run before it executes anything of it, and holds the claim while the run is live. Three
loops run beside the runs, each on its own schedule:

- renewal, every third of the lease: a run whose claim was lost (its lease expired and
  another worker took it) is stopped at once. A run's commits confirm its claim too: on
  a store that says so (:class:`eventstore.LeaseConfirmingStore`, both built-in stores),
  the transaction that appends under a claim whose lease is a third gone extends it and
  the store tells when, so a busy run keeps its claim however far the renewals fall
  behind a long queue of appends or a saturated event loop;
- expiry, before each renewal and each recovery round: a claim not confirmed for a whole
  lease on this process's clock (the process stalled: a GC pause, a frozen VM, SIGSTOP)
  may be another's by now, so its run's executor is stopped and the claim given up
  before anything is renewed or claimed; the run is then claimed again like any other.
  An executor appends only while its run's claim is confirmed (:meth:`RunOwnership.holds`);
- control, within ``control_interval``: a live run whose log has events this runtime did
  not append (a cancel, pause or input from another process) is stopped and continued
  from its log, which then says what to do. A run that hands the store a batch meets
  them there (the batch's expected seq no longer holds: ConcurrencyError), so only the
  quiet runs are read: every half interval, those that handed nothing over since the
  last look and were not read at it (:func:`quiet_runs`). A busy process does not read
  the heads of all its live runs four times a second;
- recovery (``recover=True``), at start, every ``recover_interval``, and whenever the
  store announces a runnable run (PostgreSQL's NOTIFY): runs that are running with no
  live lease (a crashed owner's, or submitted for any worker) are claimed with the
  store's skip-locked claim and resumed here.

Every claim the store makes for this runtime is held here (:attr:`RunOwnership.claims`) as
soon as the store answers, whatever cancels its asker meanwhile (a recovery round waits a
lease for the answer at most), and those of a recovery round before any of its runs is
taken on; so closing, which gives up every claim held here, leaves none of them behind.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Literal

import anyio
import anyio.abc

from actors import finish
from eventstore import (
    Claim,
    ClaimingStore,
    LeaseConfirmingStore,
    NotifyingStore,
    RunInfo,
    StoreError,
)

from .._config import OwnershipConfig, RecoveryConfig
from ._quiet import quiet_runs

__all__ = ["Ownership", "RunOwnership", "default_worker_id", "listed_ownership", "new_run_id"]

#: How a listed run stands with the processes that execute runs (see listed_ownership).
Ownership = Literal["claimed", "waiting", "unclaimed", "unrecorded"]

_log = logging.getLogger("magistrate.runtime")


def new_run_id() -> str:
    """A fresh run id: the hex of a random version-4 UUID."""
    return uuid.uuid4().hex


def default_worker_id() -> str:
    """``host:pid:random``: unique per process, readable in an error naming an owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def listed_ownership(info: RunInfo, store: object) -> Ownership:
    """How the run of a listing row read from ``store`` stands with the processes that
    execute runs. The claim is read with the row; the status is the log's.

    - ``claimed``: an unexpired claim holds the run; ``info.owner`` names its owner (a
      crashed owner stays named until its lease expires).
    - ``waiting``: the run is running and no live claim holds it: nothing executes it until
      a worker (a runtime with ``recover=True``) claims it. So is a run submitted for any
      worker, one handed over by a worker that closed, and one whose owner crashed.
    - ``unclaimed``: not running (new, paused, cancelled or finished) and not claimed.
    - ``unrecorded``: the store records no ownership (not a :class:`ClaimingStore`), so
      the listing cannot say who executes a running run: a runtime on such a store runs
      its runs in its own process, unclaimed.
    """
    if not isinstance(store, ClaimingStore):
        return "unrecorded"
    if info.owner is not None:
        return "claimed"
    return "waiting" if info.status == "running" else "unclaimed"


class _GivenUp:
    """The store's answer to a release that went with a run's final append
    (RunOwnership.release_with_append): once it is committed, the claim is no longer held
    here; on an error it stays held."""

    __slots__ = ("claim", "ownership")

    def __init__(self, ownership: RunOwnership, claim: Claim) -> None:
        self.ownership = ownership
        self.claim = claim

    def __call__(self, _: None, error: BaseException | None) -> None:
        if error is not None:
            return
        ownership, run_id = self.ownership, self.claim.run_id
        held = ownership.claims.get(run_id)
        if held is not None and held.epoch == self.claim.epoch:  # renewed meanwhile: same
            del ownership.claims[run_id]
            ownership.confirmed.pop(run_id, None)


class RunOwnership:
    """The claims a runtime holds and the loops that keep them (see the module docstring)."""

    @classmethod
    def of(
        cls,
        store: object,
        owner: str,
        ownership: OwnershipConfig,
        recovery: RecoveryConfig | None,
    ) -> RunOwnership | None:
        """The claims a runtime with these settings holds on ``store``; None on a store
        that records no ownership."""
        if not isinstance(store, ClaimingStore):
            return None
        lease = ownership.lease_seconds
        interval = recovery.interval if recovery is not None else None
        return cls(
            store,
            owner,
            lease=lease,
            control_interval=ownership.control_interval,
            recover_interval=interval or lease / 2,
        )

    def __init__(
        self,
        store: ClaimingStore,
        owner: str,
        *,
        lease: float,
        control_interval: float,
        recover_interval: float,
    ) -> None:
        if lease <= 0 or control_interval <= 0 or recover_interval <= 0:
            raise ValueError("lease, control_interval and recover_interval must be > 0")
        self.store = store
        self.owner = owner
        self.lease = lease
        self.control_interval = control_interval
        self.recover_interval = recover_interval
        self.claims: dict[str, Claim] = {}
        #: When each held claim's lease last started, at the latest (this process's
        #: monotonic clock, read before asking the store): it runs out a lease later.
        self.confirmed: dict[str, float] = {}
        #: New runs whose claim goes with their first append (claim_start).
        self._pending: set[str] = set()
        #: Whether the store's submit_release takes ``with_append`` (a store of one's own
        #: written before it did: its runs' claims are released at their end as before).
        self._with_append = "with_append" in inspect.signature(store.submit_release).parameters
        if isinstance(store, LeaseConfirmingStore):
            store.watch_leases(self._confirmed_by_commit)

    def _hold(self, claim: Claim, asked: float) -> None:
        self.claims[claim.run_id] = claim
        self.confirmed[claim.run_id] = asked

    def _confirmed_by_commit(self, claims: Sequence[tuple[str, int]], since: float) -> None:
        """A store's transaction started the leases of ``claims`` ((run_id, epoch): an
        append under the claim extended it, or a claim or renewal) from ``since`` on this
        process's monotonic clock: those held here are confirmed from then."""
        held, confirmed = self.claims, self.confirmed
        for run_id, epoch in claims:
            asked = confirmed.get(run_id)
            claim = held.get(run_id)
            if asked is not None and since > asked and claim is not None and claim.epoch == epoch:
                confirmed[run_id] = since

    def holds(self, run_id: str) -> bool:
        """True while this runtime holds ``run_id``'s claim and its lease has not run
        out on this process's clock (or the claim goes with the run's first append)."""
        if run_id in self._pending:
            return True
        asked = self.confirmed.get(run_id)
        return asked is not None and time.monotonic() - asked < self.lease

    async def claim(self, run_id: str) -> Claim:
        """Claim ``run_id`` (RunOwnedError if another owner's lease is live). Once asked,
        the store's answer is waited for whatever cancels the caller (an anyio scope, or
        asyncio's ``wait_for``) and the claim held here, so a caller cancelled meanwhile
        never leaves a claim in the store that nothing here gives up."""
        return await finish(self._claim(run_id, time.monotonic()))

    async def _claim(self, run_id: str, asked: float) -> Claim:
        claim = await self.store.claim(run_id, self.owner, lease=self.lease)
        self._hold(claim, asked)
        return claim

    async def claim_start(self, run_id: str | None, *, durable: bool) -> str:
        """Claim the run a start creates; return its id (``run_id``, or a new one).

        A given id is claimed at once (RunOwnedError if it is live elsewhere). A new id,
        which nobody can hold, is claimed with the run's first append where the store can
        (:meth:`claim_with_first_append`). Only for a run whose first append is
        ``durable``: its entry node runs after that commit, so nothing runs before the
        claim is taken.
        """
        if run_id is None and durable:
            new_id = self.claim_with_first_append()
            if new_id is not None:
                return new_id
        run_id = run_id or new_run_id()
        await self.claim(run_id)
        return run_id

    def claim_with_first_append(self) -> str | None:
        """A new run id, claimed with that run's first append (``submit_claim``, a SQLite
        store's: it commits in that append's transaction, and a refused claim fails the
        run's appends, which write nothing); None (nothing claimed) where the store cannot.
        For a start whose first append is durable only (see :meth:`claim_start`)."""
        new_id = new_run_id()
        asked = time.monotonic()

        def done(claim: Claim | None, error: BaseException | None) -> None:
            self._pending.discard(new_id)
            if claim is not None:
                self._hold(claim, asked)
            else:
                _log.warning("run %s: its claim was refused (%s); it does not run", new_id, error)

        if not self.store.submit_claim(new_id, self.owner, lease=self.lease, on_done=done):
            return None
        self._pending.add(new_id)
        return new_id

    def release_soon(
        self, run_id: str, tasks: anyio.abc.TaskGroup, then: Callable[[], None]
    ) -> None:
        """:meth:`release` without waiting: queued with the store's next transaction where
        the store can (``submit_release``, a SQLite store's), else in a task of ``tasks``;
        ``then()`` is called on the loop once the release is committed or has failed (at
        once if the run is not held)."""
        claim = self.claims.get(run_id)
        if claim is None:
            then()
            return

        def done(_: None, error: BaseException | None) -> None:
            if error is not None:
                _log.warning("run %s: releasing its claim failed (%s); it expires", run_id, error)
            then()

        try:
            queued = self.store.submit_release(claim, done)
        except StoreError as exc:
            done(None, exc)
            queued = True
        if queued:
            del self.claims[run_id]
            self.confirmed.pop(run_id, None)
            return

        async def release_then() -> None:
            try:
                await self.release(run_id)
            finally:
                then()

        try:
            tasks.start_soon(release_then)
        except RuntimeError:  # the runtime's tasks are stopping: release_all gives it up
            then()

    def release_with_append(self, run_id: str, expected_seq: int) -> None:
        """Give ``run_id``'s claim up with the run's next append (its final batch, at
        ``expected_seq``): in that append's transaction, after it, and only if it is
        written under the claim, where the store can (``submit_release(...,
        with_append=)``, a SQLite store's); the claim is dropped here when the store says
        so, before the append's own answer, so that :meth:`release_soon` at the run's end
        has nothing left to do. Otherwise (a store that cannot, an append not written)
        the claim stays held and is released at the run's end as before."""
        claim = self.claims.get(run_id)
        if claim is None or not self._with_append:
            return
        with contextlib.suppress(StoreError):  # a closed store: as before (it expires)
            self.store.submit_release(claim, _GivenUp(self, claim), with_append=expected_seq)

    async def mark_draining(self, run_id: str, nodes: str | None) -> None:
        """Mark the held claim of ``run_id`` draining (``nodes`` whose abandoned attempts
        run on here), or clear the mark (None); store errors are logged (the mark is only
        shown)."""
        claim = self.claims.get(run_id)
        if claim is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.store.mark_draining(claim, nodes)
            except StoreError as exc:
                _log.warning("run %s: marking its claim draining failed (%s)", run_id, exc)

    async def release(self, run_id: str) -> None:
        """Give ``run_id`` up (if held); store errors are logged, the lease then expires."""
        claim = self.claims.pop(run_id, None)
        self.confirmed.pop(run_id, None)
        if claim is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.store.release(claim)
            except StoreError as exc:
                _log.warning("run %s: releasing its claim failed (%s); it expires", run_id, exc)

    async def keep_leases(self, on_lost: Callable[[str], Awaitable[None]]) -> None:
        """Renew every held claim each third of the lease (from one renewal's asking to
        the next's, however long the store took), forever; ``on_lost`` for each claim
        that was taken over."""
        asked = time.monotonic()
        while True:
            await anyio.sleep(max(0.0, asked + self.lease / 3 - time.monotonic()))
            await self.give_up_expired(on_lost)
            asked = time.monotonic()
            held = list(self.claims.values())
            if not held:
                continue
            try:
                renewed = await self.store.renew(held, lease=self.lease)
            except StoreError as exc:
                _log.warning("renewing %d leases failed: %s", len(held), exc)
                continue
            for old, new in zip(held, renewed, strict=True):
                if self.claims.get(old.run_id) is not old:
                    continue  # released or re-claimed meanwhile
                if new is None:
                    del self.claims[old.run_id]
                    self.confirmed.pop(old.run_id, None)
                    _log.warning("run %s: its claim was lost; stopping it here", old.run_id)
                    await on_lost(old.run_id)
                else:
                    self.claims[old.run_id] = new  # a commit may have confirmed it since:
                    if self.confirmed.get(old.run_id, asked) <= asked:
                        self.confirmed[old.run_id] = asked

    async def give_up_expired(self, on_lost: Callable[[str], Awaitable[None]]) -> None:
        """Stop the run of each claim whose lease ran out on this process's clock (it
        stalled), with ``on_lost``, then give the claim up: the run's executor is stopped
        before anything else is renewed or claimed, and the run is claimed again later,
        by this worker or another, like any runnable run."""
        now = time.monotonic()
        expired = [run_id for run_id, asked in self.confirmed.items() if now - asked >= self.lease]
        for run_id in expired:
            _log.warning(
                "run %s: its lease ran out before it was renewed (this process stalled); "
                "stopping it here",
                run_id,
            )
            self.confirmed.pop(run_id, None)  # holds() is False from now on
            await on_lost(run_id)
            await self.release(run_id)

    async def watch_control(
        self,
        heads: Callable[[], dict[str, int]],
        on_foreign: Callable[[str], Awaitable[None]],
    ) -> None:
        """Within ``control_interval``, compare each quiet live run's head in the store with
        what this runtime appended (``heads()``: run_id -> last seq submitted here); call
        ``on_foreign`` for a run another process appended to. Looks every half interval
        and reads the runs :func:`quiet_runs` picks; the others meet a foreign event at
        the store's seq check of the batch they handed over."""
        marks: dict[str, int | None] = {}
        while True:
            await anyio.sleep(self.control_interval / 2)
            looked = heads()
            live, marks = quiet_runs(marks, looked)
            if not live:
                continue
            try:
                stored = await self.store.heads(live)
            except StoreError as exc:
                _log.warning("reading the heads of %d runs failed: %s", len(live), exc)
                marks.update((run_id, looked[run_id]) for run_id in live)  # not read: next look
                continue
            now = heads()
            for run_id, head in stored.items():
                # Compared with what this runtime has submitted by now (it only grows, and
                # covers every append of ours the store had committed when it answered).
                ours = now.get(run_id)
                if ours is not None and head > ours:
                    await on_foreign(run_id)

    async def _claim_runnable(self, limit: int, exclude: Collection[str]) -> list[Claim]:
        """Claim up to ``limit`` runnable runs and hold every one of them here before any
        is handed on: a recovery round cancelled while it takes its runs on one by one (the
        runtime closing) leaves each claim it made held, for closing to give up. The
        store's answer is waited for shielded from cancellation, for at most a lease (a
        claim answered later has run out on this process's clock already, and one the
        store makes after that lapses within a lease)."""
        asked = time.monotonic()
        with anyio.move_on_after(self.lease, shield=True):
            try:
                claims = await self.store.claim_runnable(
                    self.owner, lease=self.lease, limit=limit, exclude=exclude
                )
            except StoreError as exc:
                _log.warning("claiming runnable runs failed: %s", exc)
                return []
            for claim in claims:
                self._hold(claim, asked)
            return claims
        _log.warning("claiming runnable runs: no answer within a lease; any claim made lapses")
        return []

    async def recover(
        self,
        room: Callable[[], int],
        on_claimed: Callable[[str], Awaitable[None]],
        on_lost: Callable[[str], Awaitable[None]],
        excluded: Callable[[], Collection[str]] = tuple,
    ) -> None:
        """Claim runnable runs (up to ``room()`` at a time, none of ``excluded()``: runs
        this runtime is not ready to take again) and hand each to ``on_claimed``, after
        giving up expired claims (:meth:`give_up_expired`, with ``on_lost``),
        now and every ``recover_interval``, and at once when a store that announces them
        (a :class:`eventstore.NotifyingStore`: PostgreSQL's, by NOTIFY) says a run may have
        become runnable."""
        store = self.store
        signal = store.runnable_signal if isinstance(store, NotifyingStore) else None
        while True:
            # Taken before looking, so that a run submitted meanwhile still wakes the wait.
            hint = None if signal is None else signal()
            await self.give_up_expired(on_lost)
            free = room()
            if free > 0:
                claims = await self._claim_runnable(free, excluded())
                for claim in claims:
                    await on_claimed(claim.run_id)
                if len(claims) == free:
                    continue  # more may be waiting: look again at once
            with anyio.move_on_after(self.recover_interval):
                if hint is None:
                    await anyio.sleep_forever()
                else:
                    await hint.wait()
