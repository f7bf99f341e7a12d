"""The floor: the smallest plain-Python program doing our durable work with our guarantees.

No project code. What a durable 10-node linear run of ours writes, this writes too, with
the same discipline, so ``python -m benchmarks executor`` and ``load`` can print what our
machinery costs on top of what Python, msgspec, SHA-256, SQLite and fsync cost:

- per run the same 41 events, of the same types, fields and sizes (``run.started`` with
  the graph and the input, then per node ``node.started``, ``memory.written``,
  ``node.completed`` and ``edge.taken``, ending with ``run.finished``), each a msgspec
  struct encoded to JSON, chained by SHA-256 over a msgpack header (previous digest,
  run id, seq, tag, version) plus the body;
- stored as ours stores them: one row (a frame, a msgpack array of [tag, version,
  stored body]) per append, the body without its tag prefix, the hashes side by side;
  the first append holds ``run.started`` and the first ``node.started``, each step's
  append holds its outputs, its ``node.completed``, the edge and the next
  ``node.started``; the run's memory is folded from the events as they are made;
- one writer thread owning the SQLite connection (WAL, synchronous=FULL), committing
  whatever is queued in one transaction; each events row is followed by the fence's
  statement (the run's row must still end at the seq before it, and moves on), and the
  loop is answered through a future; each step awaits its commit before the next.

The no-store variant (ours is ``Runtime(None)``: no encoding and no chain) keeps the
event structs in a list and folds memory from them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

__all__ = ["FloorStore", "floor_run"]

Step = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class _Body(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    pass


class RunStarted(_Body, tag="run.started"):
    graph: dict[str, Any]
    input: dict[str, Any]
    parent_run_id: str | None = None


class NodeStarted(_Body, tag="node.started"):
    node_id: str
    visit: int
    attempt: int = 1
    branch: str | None = None


class MemoryWritten(_Body, tag="memory.written"):
    key: str
    value: Any
    op: str = "replace"
    node_id: str | None = None
    branch: str | None = None


class NodeCompleted(_Body, tag="node.completed"):
    node_id: str
    branch: str | None = None


class EdgeTaken(_Body, tag="edge.taken"):
    source: str
    target: str
    edge_index: int
    condition: str = "on_success"
    reason: str = ""
    judge_error: str | None = None


class RunFinished(_Body, tag="run.finished"):
    status: str
    quality: str = "clean"
    total_retries: int = 0
    error: str | None = None
    goal_outcome: str | None = None


_ENCODE = msgspec.json.Encoder().encode
_PACK = msgspec.msgpack.Encoder().encode
_TAGS = {cls: cls.__struct_config__.tag for cls in _Body.__subclasses__()}
_PREFIX = {cls: len(b'{"type":"' + str(tag).encode() + b'"') for cls, tag in _TAGS.items()}


class FloorStore:
    """One SQLite file and the thread that owns its connection."""

    def __init__(self, path: str) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(path,), daemon=True)
        self._thread.start()
        self._ready.wait()
        self.commits = 0

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def append(self, item: tuple[Any, ...]) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self._queue.put((item, future))
        return future

    def _serve(self, path: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(
            "CREATE TABLE IF NOT EXISTS runs (run INTEGER PRIMARY KEY, run_id TEXT UNIQUE,"
            " status TEXT, last_seq INTEGER, last_hash BLOB, updated REAL);"
            "CREATE TABLE IF NOT EXISTS events (position INTEGER PRIMARY KEY, run INTEGER,"
            " seq INTEGER, ts REAL, type TEXT, version INTEGER, hash BLOB, body BLOB);"
            "CREATE UNIQUE INDEX IF NOT EXISTS events_run_seq ON events (run, seq);"
        )
        self._ready.set()
        keys: dict[str, int] = {}
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = batch[-1] is None
            items = [b for b in batch if b is not None]
            conn.execute("BEGIN IMMEDIATE")
            for (run_id, seq, count, hashes, body, status), _ in items:
                now = time.time()
                run = keys.get(run_id)
                if run is None:
                    run = conn.execute(
                        "INSERT INTO runs (run_id, status, last_seq, last_hash, updated)"
                        " VALUES (?, 'running', 0, x'', ?)",
                        (run_id, now),
                    ).lastrowid
                    assert run is not None
                    keys[run_id] = run
                conn.execute(
                    "INSERT INTO events (run, seq, ts, type, version, hash, body)"
                    " VALUES (?, ?, ?, '', 0, ?, ?)",
                    (run, seq, now, hashes, body),
                )
                fenced = conn.execute(
                    "UPDATE runs SET last_seq = ?, last_hash = ?, updated = ?,"
                    " status = coalesce(?, status) WHERE run = ? AND last_seq = ?",
                    (seq + count - 1, hashes[-32:], now, status, run, seq - 1),
                )
                if fenced.rowcount != 1:
                    raise RuntimeError("the run moved on")
            conn.execute("COMMIT")
            self.commits += 1
            for _, future in items:
                future.get_loop().call_soon_threadsafe(_resolve, future)
            if stop:
                break
        conn.close()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Log:
    """One run's appends: encode, chain, frame, and await the commit."""

    __slots__ = ("digest", "events", "run_id", "seq", "store")

    def __init__(self, store: FloorStore | None) -> None:
        self.store = store
        self.run_id = uuid.uuid4().hex
        self.seq = 0
        self.digest = b""
        self.events: list[_Body] = []

    async def append(self, bodies: list[_Body], status: str | None = None) -> None:
        if self.store is None:
            self.events.extend(bodies)
            self.seq += len(bodies)
            return
        first = self.seq + 1
        hashes: list[bytes] = []
        frame = []
        digest = self.digest
        for body in bodies:
            self.seq += 1
            encoded = _ENCODE(body)
            tag = _TAGS[type(body)]
            header = _PACK((digest, self.run_id, self.seq, tag, 1))
            digest = hashlib.sha256(header + encoded).digest()
            hashes.append(digest)
            frame.append((tag, 1, b"\x00" + encoded[_PREFIX[type(body)] :]))
        self.digest = digest
        item = (self.run_id, first, len(bodies), b"".join(hashes), _PACK(frame), status)
        await self.store.append(item)


def _graph(nodes: int, function: str) -> dict[str, Any]:
    return {
        "id": f"linear-{nodes}",
        "nodes": [{"id": f"n{i}", "function": function} for i in range(nodes)],
        "edges": [{"source": f"n{i}", "target": f"n{i + 1}"} for i in range(nodes - 1)],
        "entry_node": "n0",
        "max_steps": nodes + 10,
        "durability": "sync",
    }


async def floor_run(
    store: FloorStore | None, nodes: int, step: Step, state: dict[str, Any]
) -> dict[str, Any]:
    """One linear run of ``nodes`` steps of ``step``; returns the run's final memory."""
    log = _Log(store)
    memory = dict(state)
    graph = _graph(nodes, getattr(step, "__name__", "step"))
    names = [f"n{i}" for i in range(nodes)]
    await log.append([RunStarted(graph=graph, input=state), NodeStarted(node_id=names[0], visit=1)])
    for index, node in enumerate(names):
        outputs = await step(memory)
        bodies: list[_Body] = []
        for key, value in outputs.items():
            bodies.append(MemoryWritten(key=key, value=value, node_id=node))
            memory[key] = value
        bodies.append(NodeCompleted(node_id=node))
        if index + 1 < nodes:
            bodies.append(EdgeTaken(source=node, target=names[index + 1], edge_index=index))
            bodies.append(NodeStarted(node_id=names[index + 1], visit=1))
            await log.append(bodies)
        else:
            bodies.append(RunFinished(status="completed"))
            await log.append(bodies, status="completed")
    return memory


def temp_path(directory: str) -> str:
    return os.path.join(directory, "floor.db")
