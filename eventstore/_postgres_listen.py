"""The PostgreSQL store's notifications: one LISTEN connection that wakes the followers of
``tail`` at every writer's commit and the claimers at every run that may have become
runnable (both are hints: followers and claimers poll as well)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import anyio
import psycopg

__all__ = ["Listener", "channels"]

#: The longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes); NOTIFY refuses a
#: longer channel name and LISTEN cuts it short.
_MAX_IDENTIFIER = 63


def channels(schema: str) -> tuple[str, str]:
    """The NOTIFY channels of the store in ``schema``: every commit; a run that may have
    become runnable. Each is its prefix and the schema's name, or, where that would be
    longer than an identifier, its prefix and a digest of the name."""
    return _channel("magistrate_", schema), _channel("magistrate_runnable_", schema)


def _channel(prefix: str, schema: str) -> str:
    name = prefix + schema
    if len(name.encode()) <= _MAX_IDENTIFIER:
        return name
    return prefix + "h" + hashlib.sha256(schema.encode()).hexdigest()[:32]


class Listener:
    """Listens on ``channels`` (every commit; a run that may have become runnable) in a task
    started on first use while ``is_open()``; ``on_commit`` wakes the followers."""

    __slots__ = (
        "_channel",
        "_is_open",
        "_on_commit",
        "_runnable",
        "_runnable_channel",
        "_task",
        "url",
    )

    def __init__(
        self,
        url: str,
        channels: tuple[str, str],
        is_open: Callable[[], bool],
        on_commit: Callable[[], None],
    ) -> None:
        self.url = url
        self._channel, self._runnable_channel = channels
        self._is_open = is_open
        self._on_commit = on_commit
        self._runnable: anyio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start listening (once; nothing while the store is not open)."""
        if self._task is None and self._is_open():
            self._task = asyncio.create_task(self._listen(), name="eventstore-pg-listen")

    def runnable_signal(self) -> anyio.Event:
        """See :meth:`PostgresEventStore.runnable_signal`."""
        self.start()
        if self._runnable is None:
            self._runnable = anyio.Event()
        return self._runnable

    def wake_runnable(self) -> None:
        """Set the current runnable signal (a run may have become runnable, or the store
        closed); the next :meth:`runnable_signal` is a new event."""
        runnable, self._runnable = self._runnable, None
        if runnable is not None:
            runnable.set()

    async def close(self) -> None:
        """Stop listening (waits up to 5 s for the task to end)."""
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with anyio.move_on_after(5):
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    async def _listen(self) -> None:
        while self._is_open():
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            except psycopg.Error:
                await anyio.sleep(1.0)  # followers and claimers poll meanwhile
                continue
            try:
                await conn.execute(f"LISTEN {self._channel}")
                await conn.execute(f"LISTEN {self._runnable_channel}")
                # What was announced before this LISTEN went unheard: look once more.
                self._on_commit()
                self.wake_runnable()
                async for note in conn.notifies():
                    if note.channel == self._runnable_channel:
                        self.wake_runnable()
                    else:
                        self._on_commit()
            except psycopg.Error:
                await anyio.sleep(0.1)
            finally:
                await conn.close()
