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
before a crash may be lost, which weakens the check but never makes it wrong.
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

__all__ = ["HeadsFile", "HeadsFileContents", "RecordedHead", "read_heads_file"]

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
    name = os.fspath(path)
    try:
        with open(name, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return HeadsFileContents(path=name, heads=[])
    lines = data.split(b"\n")[:-1]  # the last piece is empty, or a line cut short
    heads: list[RecordedHead] = []
    previous = ""
    cut: tuple[int, str] | None = None  # a line that is not a record: (number, why)
    for number, line in enumerate(lines, start=1):
        try:
            run_id, seq, hash, link = _parse(line)
        except ValueError as exc:
            if cut is not None:
                break
            # A write cut short by a crash, ended by the next writer, which links on from
            # the SHA-256 of its bytes (see _last_link): passed over if the next line does.
            cut, previous = (number, f"not a heads record ({exc})"), sha256(line).hexdigest()
            continue
        if link != _link(previous, run_id, seq, hash):
            if cut is not None:
                break
            return HeadsFileContents(
                path=name,
                heads=heads,
                broken_line=number,
                reason="its link does not follow from the line before (the file was edited)",
            )
        heads.append(RecordedHead(run_id, seq, hash))
        previous, cut = link, None
    if cut is not None:
        return HeadsFileContents(path=name, heads=heads, broken_line=cut[0], reason=cut[1])
    return HeadsFileContents(path=name, heads=heads)


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
        fd: int | None = None
        try:
            while True:
                with self._condition:
                    self._condition.wait_for(lambda: bool(self._pending) or self._closed)
                    batch, self._pending = self._pending, {}
                    taken = self.recorded
                    if not batch:
                        return
                try:
                    if fd is None:
                        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
                    self._append(fd, batch)
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
            if fd is not None:
                os.close(fd)

    @staticmethod
    def _append(fd: int, batch: Mapping[str, tuple[int, str]]) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            previous, cut = _last_link(fd)
            parts = ["\n"] if cut else []
            for run_id, (seq, hash) in batch.items():
                line, previous = _line(previous, run_id, seq, hash)
                parts.append(line)
            os.write(fd, "".join(parts).encode())
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
