"""The event loop's side of the writer process (the default writer of a SQLite store).

Why a process: hashing events, planning rows and binding them to SQLite statements is
Python work, and a writer *thread* does it under the interpreter lock (GIL) it shares with
the event loop. With many concurrent runs the loop is busy, so the two take turns: the
writer waits for the GIL after every SQL statement it ran without it, and every appender
waits for the writer. Measured with 200 concurrent runs of 10 steps (benchmark (c)), the
writer thread was busy for ~190 ms of a ~230 ms round, about half of that waiting for the
GIL, and the loop's own CPU time was ~160 ms per round against ~137 ms with the process
(the hand-overs cost it too). A child process has an interpreter of its own: the loop only
encodes each batch's events (which it must do anyway, to hash what it was given) and
writes them to a pipe, and the process hashes, frames, compresses and commits them.

Appends are answered in the order they were submitted (the process answers in the order
it read them). Requests submitted in one turn of the event loop go down the pipe as one
message; answers are handed out as soon as they arrive. If the process dies, every
unanswered append fails with StoreError and so does every later one: what it answered
is committed, what it did not answer may or may not be (as with a crash).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import deque
from typing import TYPE_CHECKING, Any, cast

from ._errors import ConcurrencyError, StoreClosedError, StoreError
from ._protocol import AppendResult
from ._requests import AppendRequest
from ._wire import FrameReader, frame
from ._writer_process import BOOTSTRAP

if TYPE_CHECKING:
    from ._sqlite import SqliteEventStore

__all__ = ["ProcessWriter"]

#: Appends are sent when this many are waiting, or at the end of the loop's turn.
_SEND_AT = 16
#: The most one read of the answers' pipe takes.
_READ_SIZE = 1 << 18
_PACKAGES_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ProcessWriter:
    """Starts the writer process of one store, sends it appends, hands out its answers."""

    def __init__(
        self, store: SqliteEventStore, synchronous: str, max_batch: int, capacity: int
    ) -> None:
        self._store = store
        self._synchronous = synchronous
        self._max_batch = max_batch
        self._capacity = capacity
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._reader = FrameReader()
        # Submitted and not yet answered, in submission order (the order of the answers).
        self._waiting: deque[AppendRequest] = deque()
        self._outbox: list[list[Any]] = []  # submitted this turn of the loop, not yet sent
        self._flush_due = False
        self._ready: asyncio.Future[None] = self._loop.create_future()
        # Set once the process has exited and its last answer was read.
        self._ended: asyncio.Future[None] = self._loop.create_future()
        self._stdout_done = False
        self._exit_done = False
        self._space: asyncio.Event | None = None
        self._closing = False
        self._failure: str | None = None  # why the process can take no more appends
        self._stdout_fd: int | None = None
        self._receiving = False  # handing out answers (_poll must not nest in it)
        self.pid: int | None = None
        #: The write connection's pragmas (synchronous, journal_mode, busy_timeout), as the
        #: process reported them once ready.
        self.settings: dict[str, Any] = {}

    @property
    def queued(self) -> int:
        return len(self._waiting)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the process and wait until it has opened the store.

        Raises StoreError if it cannot be started or fails to open the store.
        """
        if not sys.executable:
            raise StoreError(
                "cannot start the writer process: sys.executable is empty; "
                "use DurabilityConfig(writer='thread')"
            )
        store = self._store
        try:
            transport, _ = await self._loop.subprocess_exec(
                lambda: _Pipes(self),
                sys.executable,
                "-c",
                BOOTSTRAP,
                _PACKAGES_ROOT,
                store.path,
                self._synchronous,
                str(self._max_batch),
                str(os.getpid()),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
            )
        except OSError as exc:
            raise StoreError(f"cannot start the writer process: {exc}") from exc
        self._transport = transport
        self.pid = transport.get_pid()
        # A WriteTransport by contract, though not by class on every loop (uvloop's pipes
        # are not asyncio.WriteTransport subclasses).
        self._stdin = cast("asyncio.WriteTransport", transport.get_pipe_transport(0))
        # The answers' pipe, read by the transport when the loop polls, and by _poll when a
        # send goes out mid-turn (None where the loop's pipe transport does not expose it).
        stdout = transport.get_pipe_transport(1)
        pipe = None if stdout is None else stdout.get_extra_info("pipe")
        self._stdout_fd = pipe.fileno() if pipe is not None else None
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            self.kill()
            raise

    async def close(self) -> None:
        """Commit and answer everything submitted, then let the process exit; wait for it."""
        self._closing = True
        self._flush()
        if self._stdin is not None:
            self._stdin.close()  # after what is buffered: the end of the process's input
        await asyncio.shield(self._ended)
        self._dispose()

    def kill(self) -> None:
        """Stop the process at once (nothing it has not answered is acknowledged)."""
        self._closing = True
        transport = self._transport
        if transport is not None and transport.get_returncode() is None:
            try:
                transport.kill()
            except ProcessLookupError:
                pass
        self._dispose()

    def _dispose(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail_waiting(StoreClosedError("append", "the store closed before it was written"))

    # -- appends ---------------------------------------------------------------------------

    def submit(self, request: AppendRequest) -> bool:
        """Queue ``request`` for the process; False if too many appends are unanswered.

        Raises StoreClosedError once closing began, StoreError if the process died.
        """
        if self._failure is not None:
            raise StoreError(self._failure)
        if self._closing:
            raise StoreClosedError("append")
        if len(self._waiting) >= self._capacity:
            return False
        self._waiting.append(request)
        status, graph_hash = request.status
        self._outbox.append(
            [
                request.run_id,
                request.expected_seq,
                request.tags,
                request.versions,
                request.bodies,
                status,
                graph_hash,
            ]
        )
        if len(self._outbox) >= _SEND_AT:
            self._flush()
        elif not self._flush_due:
            self._flush_due = True
            self._loop.call_soon(self._flush_turn)
        return True

    async def wait_for_space(self) -> None:
        """Wait until the process next answers."""
        if self._space is None:
            self._space = asyncio.Event()
        await self._space.wait()

    def collect(self) -> None:
        """Answers are handed out as they arrive: nothing is ever waiting to be collected."""

    def _flush_turn(self) -> None:
        self._flush_due = False
        self._flush()

    def _flush(self) -> None:
        if not self._outbox or self._stdin is None or self._stdin.is_closing():
            return
        outbox, self._outbox = self._outbox, []
        self._stdin.write(frame(outbox))
        self._poll()

    def _poll(self) -> None:
        """Hand out the answers already in the pipe, without waiting for the loop's poll.

        With many runs, the loop works through long turns (every run woken at once), and
        the process answers while one is under way. Read only at the next poll, an answer
        would start its caller's next step a whole turn later; read here (whenever a send
        goes out mid-turn), its callbacks run now, so the steps they start are queued for
        the very next turn. 200 concurrent runs of 10 steps (benchmark (c), on tmpfs):
        wall medians ~200 -> ~160 ms.
        """
        fd = self._stdout_fd
        if fd is None or self._receiving:
            return
        try:
            data = os.read(fd, _READ_SIZE)
        except OSError:  # nothing there yet (EAGAIN), or an error the transport will see
            return
        if data:  # b"" is the end of the pipe: the transport sees it too, and handles it
            self._received(data)

    # -- the process's answers (on the loop) -----------------------------------------------

    def _received(self, data: bytes) -> None:
        try:
            messages = self._reader.feed(data)
        except ValueError as exc:
            self._died(f"the writer process sent a corrupt answer ({exc})")
            self.kill()
            return
        self._receiving = True
        try:
            self._handle(messages)
        finally:
            self._receiving = False

    def _handle(self, messages: list[Any]) -> None:
        for message in messages:
            kind = message[0]
            if kind == "batch":
                self._answer(*message[1:])
            elif kind == "ready":
                self.settings = dict(message[1])
                if not self._ready.done():
                    self._ready.set_result(None)
            else:  # "fatal"
                self._died(f"the writer process failed: {message[1]}")

    def _answer(self, count: int, seconds: float, error: str | None, outcomes: list[Any]) -> None:
        waiting = self._waiting
        batch = [waiting.popleft() for _ in range(count)]
        if error is not None:
            failure = StoreError(error)
            for request in batch:
                request.fail(failure)
        else:
            for request, outcome in zip(batch, outcomes, strict=True):
                if len(outcome) == 4:
                    request.result = AppendResult(*outcome)
                elif len(outcome) == 2:
                    request.error = ConcurrencyError(request.run_id, outcome[0], outcome[1])
                else:
                    request.error = StoreError(outcome[0])
            self._store._record_batch(batch, seconds)
            for request in batch:
                request.finish()
        self._wake_space_waiters()

    def _died(self, reason: str) -> None:
        """The process can take no more appends: fail those it did not answer."""
        if self._failure is None:
            self._failure = reason
        failure = StoreError(self._failure)
        if not self._ready.done():
            self._ready.set_exception(failure)
        self._fail_waiting(failure)

    def _fail_waiting(self, error: StoreError) -> None:
        self._outbox.clear()
        while self._waiting:
            self._waiting.popleft().fail(error)
        self._wake_space_waiters()

    def _wake_space_waiters(self) -> None:
        space, self._space = self._space, None
        if space is not None:
            space.set()

    def _stdout_closed(self) -> None:
        self._stdout_done = True
        self._maybe_gone()

    def _process_exited(self) -> None:
        self._exit_done = True
        self._maybe_gone()

    def _maybe_gone(self) -> None:
        # Once it has exited AND every answer it wrote has been read: before, an answer
        # still in the pipe could be taken for a lost one.
        if not (self._stdout_done and self._exit_done) or self._ended.done():
            return
        if self._waiting or not self._ready.done() or not self._closing:
            code = None if self._transport is None else self._transport.get_returncode()
            self._died(f"the writer process exited with code {code} (see its error output)")
        self._ended.set_result(None)


class _Pipes(asyncio.SubprocessProtocol):
    def __init__(self, writer: ProcessWriter) -> None:
        self._writer = writer

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._writer._received(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._writer._stdout_closed()

    def process_exited(self) -> None:
        self._writer._process_exited()
