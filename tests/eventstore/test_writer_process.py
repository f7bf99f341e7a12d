"""The writer process (the SQLite store's default writer): its life, its death, its errors."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from eventstore import (
    DurabilityConfig,
    SqliteEventStore,
    StoreClosedError,
    StoreError,
    _process_writer,
)
from runtime import NodeStarted, RunStarted

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def started() -> RunStarted:
    return RunStarted(graph={}, graph_hash="gh", entry="a")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by whoever adopted it) is not alive either.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_the_writer_is_a_child_process_that_exits_when_the_store_closes(
    tmp_path: Path,
) -> None:
    store = SqliteEventStore(tmp_path / "s.db")
    await store.open()
    assert store._process is not None and store._process.pid is not None
    pid = store._process.pid
    assert pid != os.getpid() and _alive(pid)
    await store.append("r1", [started()], expected_seq=0)
    await store.close()
    assert not _alive(pid)
    # What it committed is in the file, and the WAL was merged into it.
    assert not (tmp_path / "s.db-wal").exists() or (tmp_path / "s.db-wal").stat().st_size == 0
    async with SqliteEventStore(tmp_path / "s.db") as again:
        assert len(await again.read_all("r1")) == 1


async def test_a_killed_writer_fails_unanswered_and_later_appends_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    acknowledged: dict[str, int] = {}
    failures: list[BaseException] = []
    async with SqliteEventStore(path) as store:
        assert store._process is not None and store._process.pid is not None
        pid = store._process.pid

        async def appender(index: int) -> None:
            run, seq = f"r{index}", 0
            try:
                seq = (await store.append(run, [started()], expected_seq=0)).last_seq
                acknowledged[run] = seq
                for visit in range(1, 1000):
                    batch = [NodeStarted(node_id="a", visit=visit)]
                    seq = (await store.append(run, batch, expected_seq=seq)).last_seq
                    acknowledged[run] = seq
            except StoreError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for index in range(20):
                tg.start_soon(appender, index)
            while sum(acknowledged.values()) < 200:  # noqa: ASYNC110 (a condition to poll)
                await anyio.sleep(0.001)
            os.kill(pid, signal.SIGKILL)
        # Every appender learned that its append failed, and why.
        assert len(failures) == 20
        assert all("writer process" in str(exc) for exc in failures)
        with pytest.raises(StoreError, match="writer process"):
            await store.append("late", [started()], expected_seq=0)
        stats = store.statistics()
    assert stats.queued == 0
    # Reopened: every acknowledged event is there; what was never answered may or may not be.
    async with SqliteEventStore(path) as store:
        for run, seq in acknowledged.items():
            assert len(await store.read_all(run)) >= seq
            assert (await store.verify(run)).ok
        assert await store.read_all("late") == []


async def test_the_writer_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    # A crashed parent's writer must not go on committing behind a resumed run's back.
    if not sys.platform.startswith("linux"):
        pytest.skip("parent-death signal is Linux-only; elsewhere the pipe's end stops it")
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from eventstore import SqliteEventStore

        async def main():
            store = SqliteEventStore({str(tmp_path / "s.db")!r})
            await store.open()
            print(store._process.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    done = await anyio.run_process([sys.executable, "-c", script], check=False)
    assert done.returncode == -signal.SIGKILL
    writer_pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(writer_pid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await anyio.sleep(0.01)
    assert not _alive(writer_pid)
    async with SqliteEventStore(tmp_path / "s.db") as store:  # and the file is fine
        assert await store.list_runs() == []


async def test_a_writer_that_cannot_start_is_a_clear_error_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its imports fail (the packages are not where it looks): it exits before it is ready.
    monkeypatch.setattr(_process_writer, "_PACKAGES_ROOT", str(tmp_path / "nowhere"))
    store = SqliteEventStore(tmp_path / "s.db")
    with pytest.raises(StoreError, match="writer process exited with code 1"):
        await store.open()
    with pytest.raises(StoreClosedError):
        await store.append("r1", [started()], expected_seq=0)
    await store.close()  # nothing to do, and no error
    # The file was created and is a store: a thread writer opens it.
    async with SqliteEventStore(tmp_path / "s.db", config=DurabilityConfig(writer="thread")):
        pass


async def test_no_python_to_start_the_writer_names_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", "")
    with pytest.raises(StoreError, match="writer='thread'"):
        await SqliteEventStore(tmp_path / "s.db").open()
    monkeypatch.undo()
    async with SqliteEventStore(tmp_path / "s.db") as store:
        await store.append("r1", [started()], expected_seq=0)


async def test_appends_made_before_close_are_all_committed_by_the_writer_process(
    tmp_path: Path,
) -> None:
    # Close lets the process commit and answer everything it was sent before it exits.
    store = SqliteEventStore(tmp_path / "s.db")
    await store.open()
    results: list[int] = []

    async def append(index: int) -> None:
        result = await store.append(f"r{index}", [started()], expected_seq=0)
        results.append(result.last_seq)

    async with anyio.create_task_group() as tg:
        for index in range(300):
            tg.start_soon(append, index)
        await anyio.lowlevel.checkpoint()  # every append is submitted, none is answered yet
        await store.close()
    assert results == [1] * 300
    async with SqliteEventStore(tmp_path / "s.db") as store:
        runs = await store.list_runs(limit=1000)
    assert len(runs) == 300


def test_a_writer_process_is_refused_where_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # It waits on its stdin with select(), which Windows has for sockets only.
    assert DurabilityConfig().writer == "process"  # here, on a POSIX system
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(ValueError, match="writer='process' needs a POSIX system"):
        DurabilityConfig(writer="process")
    assert DurabilityConfig(writer="thread").writer == "thread"


def _wait_for_answers(store: SqliteEventStore, timeout: float = 20.0, settle: float = 0) -> None:
    """Block (without giving the event loop a turn) until answers wait in the pipe, then
    ``settle`` seconds more (for the answers to the rest of what was sent)."""
    import select

    assert store._process is not None and store._process._stdout_fd is not None
    readable, _, _ = select.select([store._process._stdout_fd], [], [], timeout)
    assert readable, "the writer process did not answer"
    time.sleep(settle)


async def test_answers_already_in_the_pipe_are_handed_out_when_the_next_batch_is_sent(
    tmp_path: Path,
) -> None:
    # Mid-turn, with no await in between: the answers to the first 16 appends are read
    # and their callbacks run when the 16 appends after them go out, not at the loop's
    # next poll.
    answered: list[tuple[str, int]] = []
    all_answered = anyio.Event()

    def recorder(run_id: str) -> Any:
        def on_done(result: Any, error: BaseException | None) -> None:
            assert error is None and result is not None
            answered.append((run_id, result.last_seq))
            if len(answered) == 32:
                all_answered.set()

        return on_done

    async with SqliteEventStore(tmp_path / "s.db") as store:
        first = [f"a{i}" for i in range(16)]
        for run_id in first:
            assert store.submit(run_id, [started()], expected_seq=0, on_done=recorder(run_id))
        _wait_for_answers(store)
        assert answered == []  # nothing has read the pipe yet
        second = [f"b{i}" for i in range(16)]
        for run_id in second:
            assert store.submit(run_id, [started()], expected_seq=0, on_done=recorder(run_id))
        # The 16th submit sent the second batch and handed out the first one's answers.
        assert answered == [(run_id, 1) for run_id in first]
        with anyio.fail_after(20):
            await all_answered.wait()
        assert answered[16:] == [(run_id, 1) for run_id in second]


async def test_a_callback_that_submits_while_answers_are_handed_out_gets_its_own_answer(
    tmp_path: Path,
) -> None:
    # A callback may tell someone who appends at once. The send that append makes must not
    # read the answers that arrived meanwhile in the middle of handing out answers: they
    # would be given to the requests still waiting for theirs. With max_batch=8, one read
    # holds the answers to two transactions, and the callback of the first one's first
    # request submits. Each run appends its own number of events, so an answer given to
    # the wrong request shows in last_seq.
    results: dict[str, int] = {}
    blocked: list[bool] = []
    all_answered = anyio.Event()

    def batch(index: int) -> list[Any]:
        return [started()] + [NodeStarted(node_id=f"n{i}", visit=1) for i in range(index)]

    def submit(run_id: str, index: int) -> None:
        assert store.submit(run_id, batch(index), expected_seq=0, on_done=record(run_id))

    def record(run_id: str) -> Any:
        def on_done(result: Any, error: BaseException | None) -> None:
            assert error is None and result is not None
            results[run_id] = result.last_seq
            if len(results) == 48:
                all_answered.set()
            if run_id == "a0" and not blocked:
                blocked.append(True)
                _wait_for_answers(store, settle=0.3)  # the b batch's answers are in the pipe
                for i in range(16):  # the 16th sends, mid hand-out
                    submit(f"c{i}", i)

        return on_done

    async with SqliteEventStore(tmp_path / "s.db", config=DurabilityConfig(max_batch=8)) as store:
        for i in range(16):
            submit(f"a{i}", i)
        _wait_for_answers(store, settle=0.3)
        for i in range(16):
            submit(f"b{i}", 16 + i)  # the 16th sends, then hands out the a batch
        assert blocked == [True]
        with anyio.fail_after(20):
            await all_answered.wait()
    expected = {f"a{i}": i + 1 for i in range(16)}
    expected |= {f"b{i}": 17 + i for i in range(16)}
    expected |= {f"c{i}": i + 1 for i in range(16)}
    assert results == expected
