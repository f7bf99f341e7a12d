"""The followers of a store's ``tail``, and the one poll of the store's head they share.

A follower reads its chunk when there may be something after its position: at a commit of
this store's writer (or, on PostgreSQL, a NOTIFY), or when a poll of the store's head saw
the head pass its position. Only one follower polls at a time (the poller: the one waiting
with the shortest ``poll_interval``), one cheap query of the head per interval for every
follower of the store; the others wait without a timer. A poller that stops waiting (to
read, or because it ended) hands the role on to a follower still waiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio

from ._errors import StoreClosedError
from ._events import Event

__all__ = ["Followers", "Head", "TailChunk"]

#: One chunk of a follower's catch-up after a position: its events, and whether the chunk
#: was full (more may follow at once, so the follower does not wait before the next).
TailChunk = Callable[[int], Awaitable[tuple[list[Event], bool]]]

#: The position of the store's newest committed event (0 when it has none).
Head = Callable[[], Awaitable[int]]


class _Follower:
    """One iteration of ``tail``: how to read the store's head, and how often."""

    __slots__ = ("head", "interval")

    def __init__(self, head: Head, interval: float) -> None:
        self.head = head
        self.interval = interval


class Followers:
    """The followers of one store. Used on the event loop's thread only.

    ``is_live()`` says whether the store still serves them (open or closing).
    """

    __slots__ = ("_changes", "_head", "_is_live", "_poller", "_signal")

    def __init__(self, is_live: Callable[[], bool]) -> None:
        self._is_live = is_live
        self._changes = 0  # commits of this store (and its close) seen by wake()
        self._head = 0  # the highest head a poll saw
        self._poller: _Follower | None = None
        # Set at the next change; made by a follower when it waits, replaced once set.
        self._signal: anyio.Event | None = None

    def wake(self) -> None:
        """Wake every waiting follower to read its chunk (at a commit, or at close). On
        every commit's path: no call beyond this one when nobody waits."""
        self._changes += 1
        signal = self._signal
        if signal is not None:
            self._signal = None
            signal.set()

    def _set(self) -> None:
        signal, self._signal = self._signal, None
        if signal is not None:
            signal.set()

    async def follow(
        self, chunk: TailChunk, head: Head, from_position: int, poll_interval: float
    ) -> AsyncIterator[Event]:
        """Yield the events after ``from_position`` chunk by chunk, then wait until there
        may be more (:meth:`wake`, or a poll of ``head`` saw it pass the last position
        yielded); end when the store no longer serves followers."""
        me = _Follower(head, poll_interval)
        position = from_position
        while self._is_live():
            # Taken before the read: a commit during it reads again, and the read sees at
            # least the head a poll saw before it.
            changes, head_seen = self._changes, self._head
            try:
                events, full = await chunk(position)
            except StoreClosedError:
                return
            for event in events:
                position = event.position
                yield event
            if not full:
                await self._wait(me, changes, max(position, head_seen))

    async def _wait(self, me: _Follower, changes: int, position: int) -> None:
        """Return once a commit here followed ``changes``, a poll saw the head pass
        ``position`` (what the follower has read up to), or the store stopped serving
        followers."""
        try:
            while self._changes == changes and self._head <= position and self._is_live():
                signal = self._signal
                if signal is None:
                    signal = self._signal = anyio.Event()
                poller = self._poller
                if poller is None or me.interval < poller.interval:
                    self._poller = poller = me
                if poller is not me:
                    await signal.wait()  # a change, or the poller handing its role on
                    continue
                with anyio.move_on_after(me.interval):
                    await signal.wait()
                if not signal.is_set() and self._poller is me:
                    await self._poll(me.head)
        finally:
            if self._poller is me:
                self._poller = None
                self._set()  # a follower still waiting polls in its place

    async def _poll(self, read_head: Head) -> None:
        """Read the store's head once; wake the followers if it moved."""
        try:
            head = await read_head()
        except StoreClosedError:
            return  # closing: the close wakes every follower
        if head > self._head:
            self._head = head
            self._set()
