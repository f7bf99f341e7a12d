"""The heads file: an append-only, chained record of runs' heads, kept beside a store.

A hash chain proves that no stored event was edited, dropped or reordered, but a log
rewritten consistently (an event changed and every hash after it recomputed) or cut after
its last good event still chains. The heads file is the reference that catches both: after
each commit of a run, the process that wrote it records the run's head (run id, seq, chain
hash) in it, and ``verify`` checks that every recorded head is still in the log with the
same hash.

Each line is one JSON object, ``{"run": ..., "seq": ..., "hash": ..., "link": ...}``,
where ``link`` is the SHA-256 of the previous line's link and the line's run, seq and hash
(the first line's previous link is empty): an edited, inserted or removed line breaks the
links after it, which :func:`read_heads_file` reports. Every line is derivable from the
log (the head of a run at some seq), so a heads file holds nothing a store does not.

Lines are appended by a background thread, in batches (what is recorded within 50 ms of
a write goes in the next, one line for each run that moved: its newest head), under an
exclusive ``flock`` (the processes sharing a store
share its heads file, each line linked to the file's last one), and fsynced after each
batch. Recording never waits for the disk: a head recorded just
before a crash may be lost, which weakens the check but never makes it wrong. The writer
keeps the file open; before each batch, under the lock, it checks that the path still
names that file, and once it does not (the file moved away, replaced or deleted, as log
rotation does) it opens the path again, creating the file if need be, and logs one
warning: the heads go on to the file at the path, linked to its last line (the first
line of a new file links to the empty link, as any file's first line does).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Mapping
from hashlib import sha256

import msgspec

__all__ = [
    "HeadsFile",
    "HeadsFileContents",
    "HeadsFileReader",
    "RecordedHead",
    "read_heads_file",
]

_log = logging.getLogger("magistrate.eventstore")

#: How much of the file's end is read to find its last line's link.
_TAIL_BYTES = 8192
#: How long the writer gathers heads after a write before the next (woken early by close).
_GATHER_SECONDS = 0.05


class RecordedHead(msgspec.Struct, frozen=True):
    """A run's head as its owner recorded it: the run's event ``seq`` had chain ``hash``."""

    run_id: str
    seq: int
    hash: str


class HeadsFileContents(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`read_heads_file` found: the heads of the lines that link up, in file
    order, and the first line that does not (``broken_line``, 1-based, with ``reason``);
    a missing file reads as no heads."""

    path: str
    heads: list[RecordedHead]
    broken_line: int | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.broken_line is None

    def newest(self) -> dict[str, RecordedHead]:
        """Each run's recorded head with the highest seq (a chain hash at a seq covers
        every event before it, so it is the only one worth checking)."""
        newest: dict[str, RecordedHead] = {}
        for head in self.heads:
            kept = newest.get(head.run_id)
            if kept is None or head.seq >= kept.seq:
                newest[head.run_id] = head
        return newest


def _link(previous: str, run_id: str, seq: int, hash: str) -> str:
    payload = json.dumps([previous, run_id, seq, hash], ensure_ascii=True)
    return sha256(payload.encode()).hexdigest()


def _line(previous: str, run_id: str, seq: int, hash: str) -> tuple[str, str]:
    link = _link(previous, run_id, seq, hash)
    record = {"run": run_id, "seq": seq, "hash": hash, "link": link}
    return json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n", link


def _parse(line: bytes) -> tuple[str, int, str, str]:
    """(run, seq, hash, link) of one line; ValueError if it is not a heads line."""
    record = json.loads(line)
    if not isinstance(record, dict) or set(record) != {"run", "seq", "hash", "link"}:
        raise ValueError("not a heads record")
    run_id, seq, hash, link = record["run"], record["seq"], record["hash"], record["link"]
    if not (
        isinstance(run_id, str)
        and type(seq) is int
        and isinstance(hash, str)
        and isinstance(link, str)
    ):
        raise ValueError("a field has the wrong type")
    return run_id, seq, hash, link


def read_heads_file(path: str | os.PathLike[str]) -> HeadsFileContents:
    """Read and check a heads file (blocking). A line that is not a heads record, or
    whose link does not follow from the line before, ends the read: the heads before it
    are returned with the line's number and the reason. A last line without its newline
    (a write cut short by a crash) is ignored, and so is such a line once the next writer
    ended it, when the line after links on from it as that writer does. Raises OSError if
    the file exists but cannot be read."""
    reader = HeadsFileReader(path)
    reader.read()
    return reader.contents()


class HeadsFileReader:
    """A heads file read as it grows: each :meth:`read` parses only the bytes appended
    since the one before (the file is append-only), checked as :func:`read_heads_file`
    checks the whole file, and returns the heads they add. A file replaced (another
    inode), shorter than what was read, or whose last line read is not there any more, is
    read again from its start. Once a line breaks the links, later lines are not read (as
    a whole read stops there). Not thread-safe."""

    __slots__ = ("_cut", "_inode", "_last", "_line", "_offset", "_previous", "heads", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._reset(None)

    def _reset(self, inode: int | None) -> None:
        #: Every head read so far, in file order.
        self.heads: list[RecordedHead] = []
        self._inode = inode
        self._offset = 0  # the bytes taken: through the last line that linked up
        self._last = b""  # that line, its newline included
        self._previous = ""  # its link
        self._line = 0  # its number
        # The break met (line number, why, final): final for a line that does not link on;
        # not for a last line that is not a record (the next writer may link on from it).
        self._cut: tuple[int, str, bool] | None = None

    def contents(self) -> HeadsFileContents:
        """What the file holds as last read (a copy of the heads)."""
        cut = self._cut
        return HeadsFileContents(
            path=self.path,
            heads=list(self.heads),
            broken_line=None if cut is None else cut[0],
            reason=None if cut is None else cut[1],
        )

    def read(self) -> list[RecordedHead]:
        """The heads the file gained since the last read (every head the first time, and
        after the file was replaced or cut: then :attr:`heads` starts again). Raises
        OSError if the file exists but cannot be read; a missing file holds no heads."""
        try:
            file = open(self.path, "rb")
        except FileNotFoundError:
            self._reset(None)
            return []
        with file:
            stat = os.fstat(file.fileno())
            if stat.st_ino != self._inode or stat.st_size < self._offset:
                self._reset(stat.st_ino)
            start = self._offset - len(self._last)
            file.seek(start)
            data = file.read()
            if not data.startswith(self._last):  # written over: read it all again
                self._reset(stat.st_ino)
                file.seek(0)
                data = file.read()
            elif (self._cut is not None and self._cut[2]) or len(data) == len(self._last):
                return []  # nothing new, or nothing more to read after a break
            else:
                data = data[len(self._last) :]
        return self._take(data.split(b"\n")[:-1])  # the last piece: empty, or cut short

    def _take(self, lines: list[bytes]) -> list[RecordedHead]:
        added: list[RecordedHead] = []
        previous, number, offset = self._previous, self._line, self._offset
        # A line that is not a record, passed over if the next links on from its bytes:
        # (its number, why).
        cut: tuple[int, str] | None = None
        self._cut = None
        for line in lines:
            number += 1
            try:
                run_id, seq, hash, link = _parse(line)
            except ValueError as exc:
                if cut is not None:
                    break
                cut = (number, f"not a heads record ({exc})")
                previous, offset = sha256(line).hexdigest(), offset + len(line) + 1
                continue
            if link != _link(previous, run_id, seq, hash):
                if cut is None:
                    why = "its link does not follow from the line before (the file was edited)"
                    self._cut = (number, why, True)
                break
            added.append(RecordedHead(run_id, seq, hash))
            previous, offset, cut = link, offset + len(line) + 1, None
            self._previous, self._offset, self._line = previous, offset, number
            self._last = line + b"\n"
        else:
            if cut is not None:  # the last line: the next writer may link on from it
                self._cut = (cut[0], cut[1], False)  # read again from it next time
        if cut is not None and self._cut is None:  # a line after it did not link on
            self._cut = (cut[0], cut[1], True)
        self.heads.extend(added)
        return added


def _last_link(fd: int) -> tuple[str, bool]:
    """The link of the file's last line ("" for an empty file; a line that is not a
    heads record links on from the SHA-256 of its bytes), and whether that line lacks
    its newline (a write cut short: the next write ends it, and a read reports it)."""
    size = os.fstat(fd).st_size
    start = max(0, size - _TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    if not tail:
        return "", False
    cut = not tail.endswith(b"\n")
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        return _parse(last)[3], cut
    except ValueError:
        return sha256(last).hexdigest(), cut


class HeadsFile:
    """The writer of one heads file (see the module's docstring). Thread-safe.

    :meth:`record` queues a head and returns at once; a daemon thread appends what is
    queued (never keeping the process from exiting). :meth:`close` writes what is queued
    and stops it.
    """

    __slots__ = (
        "_closed",
        "_condition",
        "_fd",
        "_pending",
        "_stopping",
        "_thread",
        "_written",
        "path",
        "recorded",
    )

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._condition = threading.Condition()
        #: The newest head recorded of each run since the last write (one line a run).
        self._pending: dict[str, tuple[int, str]] = {}
        self._thread: threading.Thread | None = None
        #: The writer thread's open file (the one the path named when it was opened).
        self._fd: int | None = None
        self._closed = False
        self._stopping = threading.Event()
        #: Heads recorded, and heads written (or given up on after an error) so far.
        self.recorded = 0
        self._written = 0

    def __repr__(self) -> str:
        return f"<HeadsFile {self.path!r}>"

    def record(self, run_id: str, seq: int, hash: str) -> None:
        """Queue the run's head (its event ``seq`` has chain ``hash``) for the file.

        Never blocks and never raises; after :meth:`close` it does nothing.
        """
        with self._condition:
            if self._closed:
                return
            prior = self._pending.get(run_id)
            if prior is None or seq >= prior[0]:
                self._pending[run_id] = (seq, hash)
            self.recorded += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"heads {self.path}", daemon=True
                )
                self._thread.start()
            self._condition.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (blocking) until every head recorded so far was written; False on timeout."""
        with self._condition:
            target = self.recorded
            return self._condition.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (waiting at most ``timeout`` seconds), then stop; idempotent."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            thread = self._thread
        self._stopping.set()
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                with self._condition:
                    self._condition.wait_for(lambda: bool(self._pending) or self._closed)
                    batch, self._pending = self._pending, {}
                    taken = self.recorded
                    if not batch:
                        return
                try:
                    self._append(batch)
                except OSError as exc:
                    _log.warning(
                        "could not record %d head(s) in %s: %s", len(batch), self.path, exc
                    )
                with self._condition:
                    self._written = taken
                    self._condition.notify_all()
                # Gather what comes meanwhile into the next write: under load one write
                # and one fsync per interval, not one per run at rest. Close cuts it short.
                self._stopping.wait(_GATHER_SECONDS)
        finally:
            self._drop()

    def _drop(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _moved(self, fd: int) -> bool:
        """Whether the path no longer names the open file ``fd`` (moved away, replaced or
        deleted). A path that cannot be looked up for another reason keeps the file."""
        try:
            named = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError:
            return False
        opened = os.fstat(fd)
        return (named.st_ino, named.st_dev) != (opened.st_ino, opened.st_dev)

    def _append(self, batch: Mapping[str, tuple[int, str]]) -> None:
        # Checked under the lock, so a file replaced by a writer that holds it is seen;
        # a path replaced again at once is written on the third time, as it then is.
        for attempt in range(3):
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            fd = self._fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if attempt == 2 or not self._moved(fd):
                    _write(fd, batch)
                    return
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._drop()
            _log.warning(
                "heads file %s was moved, replaced or deleted while this process wrote it: "
                "its heads go to the file now at that path from here on (those recorded "
                "before are only in the file it had open)",
                self.path,
            )


def _write(fd: int, batch: Mapping[str, tuple[int, str]]) -> None:
    """Append the batch's lines to ``fd`` (locked), linked to its last line, and fsync."""
    previous, cut = _last_link(fd)
    parts = ["\n"] if cut else []
    for run_id, (seq, hash) in batch.items():
        line, previous = _line(previous, run_id, seq, hash)
        parts.append(line)
    data = "".join(parts).encode()
    while data:  # a full disk or a file size limit cuts a write short first
        data = data[os.write(fd, data) :]
    os.fsync(fd)
