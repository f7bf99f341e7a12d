"""The writer process: by default, the one owner of a SQLite store's write connection.

A store's appends are hashed, planned and committed here, in a child process of the one
running the event loop, so that work holds this process's interpreter lock and never
the loop's (see :mod:`eventstore._process_writer` for why and for the loop's side).

It reads requests from its stdin and answers on its stdout (:mod:`eventstore._wire`).
Whenever it is free it takes every request that has arrived (at most ``max_batch``) into
ONE transaction, so a batch costs one fsync whatever its size, and while it commits the
loop gathers the next one. At the end of its stdin it commits what it holds, answers,
merges the WAL into the database file and exits. It ignores SIGINT (a Ctrl-C reaches the
whole process group; the loop's process decides when to close), and on Linux it is
killed when its parent dies, so a crashed parent's writer cannot commit after the crash.

It is started by :data:`BOOTSTRAP`, which imports this module without running the
``eventstore`` and ``actors`` package ``__init__`` modules (they import asyncio, anyio and
aiosqlite, which the writer does not use): it starts in a few tens of milliseconds
instead of ~200.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections import deque
from typing import Any

from ._core import WriterCore
from ._errors import ConcurrencyError, StoreError
from ._schema import stored_rows
from ._wire import FrameReader, frame

__all__ = ["BOOTSTRAP", "main"]

#: ``python -c BOOTSTRAP <packages root> <path> <synchronous> <max_batch> <parent pid>``
BOOTSTRAP = """\
import os, sys, types
for name in ("actors", "eventstore"):
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(sys.argv[1], name)]
    sys.modules[name] = package
from eventstore._writer_process import main
sys.exit(main(sys.argv[2:]))
"""

_READ_SIZE = 1 << 20
_PR_SET_PDEATHSIG = 1


class _Request:
    """One append request as the writer process holds it (see WriterCore's CoreRequest)."""

    __slots__ = (
        "bodies",
        "error",
        "expected_seq",
        "result",
        "rows",
        "run_id",
        "status",
        "tags",
        "versions",
    )

    def __init__(self, item: list[Any]) -> None:
        run_id, expected_seq, tags, versions, bodies, status, graph_hash = item
        self.run_id: str = run_id
        self.expected_seq: int | None = expected_seq
        self.tags: list[str] = tags
        self.versions: list[int] = versions
        self.bodies: list[bytes] = bodies
        self.status: tuple[str | None, str | None] = (status, graph_hash)
        self.rows: list[tuple[int, str, int, bytes]] | None = None
        self.result: Any = None
        self.error: BaseException | None = None

    def stored_rows(self) -> list[tuple[int, str, int, bytes]]:
        if self.rows is None:
            self.rows = stored_rows(self.tags, self.versions, self.bodies)
        return self.rows


def _outcome(request: _Request) -> list[Any]:
    error = request.error
    if error is None:
        result = request.result
        return [result.first_seq, result.last_seq, result.last_position, result.last_hash]
    if isinstance(error, ConcurrencyError):
        return [error.expected_seq, error.actual_seq]
    return [str(error)]


def _send(fd: int, message: Any) -> None:
    data = memoryview(frame(message))
    while data:
        data = data[os.write(fd, data) :]


def _follow_parent(parent: int) -> None:
    """Die with the parent (Linux), so that nothing commits after the parent crashed."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # then the end of stdin is what stops it
    if os.getppid() != parent:
        os._exit(0)  # the parent died before the line above took effect


def main(argv: list[str]) -> int:
    """Serve one store; argv is ``[path, synchronous, max_batch, parent pid]``."""
    path, synchronous, max_batch, parent = argv[0], argv[1], int(argv[2]), int(argv[3])
    _follow_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Answers go to the pipe that was stdout; whatever else is printed goes to stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    core = WriterCore(path, synchronous)
    try:
        core.connect(False, 0)  # the loop's process created or upgraded the file
    except Exception as exc:
        _send(out, ["fatal", f"{type(exc).__name__}: {exc}"])
        return 1
    try:
        conn = core.conn
        assert conn is not None
        settings = {
            name: conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("synchronous", "journal_mode", "busy_timeout")
        }
        _send(out, ["ready", settings])
        _serve(core, out, max_batch)
    except ValueError as exc:  # a corrupt request stream: nothing more can be trusted
        _send(out, ["fatal", str(exc)])
        return 1
    finally:
        core.close()
    return 0


def _serve(core: WriterCore, out: int, max_batch: int) -> None:
    reader = FrameReader()
    queue: deque[_Request] = deque()
    ended = False
    while True:
        # Take everything that has arrived; wait for more only when there is nothing to do.
        while not ended and (not queue or select.select([0], [], [], 0)[0]):
            data = os.read(0, _READ_SIZE)
            if not data:
                ended = True  # a partial frame at the end was never acknowledged: dropped
                break
            for message in reader.feed(data):
                queue.extend(_Request(item) for item in message)
        if not queue:
            return
        batch = [queue.popleft() for _ in range(min(len(queue), max_batch))]
        started = time.perf_counter()
        error: str | None = None
        try:
            core.commit(batch)
        except StoreError as exc:
            error = str(exc)
        except Exception as exc:  # sqlite3 errors and anything unforeseen: the batch failed
            error = f"append failed: {type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
        outcomes = [] if error is not None else [_outcome(request) for request in batch]
        _send(out, ["batch", len(batch), seconds, error, outcomes])
