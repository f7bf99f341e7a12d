"""Run ownership in the SQLite store: claims in the store's own file, committed by its
writer (a queued claim rides with a run's first append), and the claim-epoch fence
between processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from eventstore import (
    Claim,
    ConcurrencyError,
    LeaseLostError,
    RunOwnedError,
    SqliteEventStore,
    StoreClosedError,
    StoreError,
)
from runtime.events import MemoryWritten

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def written(value: int) -> list[MemoryWritten]:
    return [MemoryWritten(key="k", value=value)]


async def test_a_queued_claim_commits_with_the_runs_first_append(tmp_path: Path) -> None:
    answers: list[object] = []
    async with SqliteEventStore(tmp_path / "s.db") as a, SqliteEventStore(tmp_path / "s.db") as b:
        a.submit_claim(
            "r1", "worker-a", lease=5, on_done=lambda claim, error: answers.append(claim or error)
        )
        await a.append("r0", written(0), expected_seq=0)  # another run's append
        assert answers == []  # the claim is held until its run's first append
        result = await a.append("r1", written(1), expected_seq=0)
        assert result.last_seq == 1
        claim = answers[0]  # answered before the append it rides with
        assert isinstance(claim, Claim) and (claim.owner, claim.epoch) == ("worker-a", 1)
        with pytest.raises(RunOwnedError) as caught:
            await b.claim("r1", "worker-b", lease=5)
        assert caught.value.owner == "worker-a"
        released: list[object] = []
        assert a.submit_release(claim, lambda _, error: released.append(error))
        await a.append("r0", written(1), expected_seq=1)  # committed with or after it
        assert released == [None]
        assert (await b.claim("r1", "worker-b", lease=5)).epoch == 2
        a.submit_claim(
            "r2", "worker-a", lease=5, on_done=lambda claim, error: answers.append(error)
        )
    assert isinstance(answers[-1], StoreClosedError)  # r2 was never appended to
    assert not (tmp_path / "s.db-claims").exists()  # claims live in the store's file


async def test_a_refused_queued_claim_fails_the_runs_appends(tmp_path: Path) -> None:
    answers: list[object] = []
    async with SqliteEventStore(tmp_path / "s.db") as a, SqliteEventStore(tmp_path / "s.db") as b:
        held = await b.claim("r1", "worker-b", lease=30)
        a.submit_claim(
            "r1", "worker-a", lease=5, on_done=lambda claim, error: answers.append(claim or error)
        )
        with pytest.raises(RunOwnedError) as caught:
            await a.append("r1", written(1), expected_seq=0)
        assert caught.value.owner == "worker-b"
        assert isinstance(answers[0], RunOwnedError)
        assert await b.read_all("r1") == []  # nothing was written
        await b.release(held)
        await a.claim("r1", "worker-a", lease=5)  # claimed again: the appends go through
        await a.append("r1", written(1), expected_seq=0)
        assert len(await b.read_all("r1")) == 1


async def test_claims_are_kept_in_the_file_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        claim = await store.claim("r1", "worker-a", lease=30)
    async with SqliteEventStore(path) as store:
        with pytest.raises(RunOwnedError):
            await store.claim("r1", "worker-b", lease=5)
        assert await store.renew([claim], lease=30) != [None]


async def test_a_process_whose_claim_was_taken_over_cannot_append(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")

    def spawn() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.eventstore.claim_holder", db, "r1", "2"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    process = await anyio.to_thread.run_sync(spawn)
    try:
        assert process.stdin is not None and process.stdout is not None
        line = await anyio.to_thread.run_sync(process.stdout.readline)
        assert line.strip() == "claimed", process.stderr.read() if process.stderr else ""
        async with SqliteEventStore(db) as store:
            with pytest.raises(RunOwnedError):
                await store.claim("r1", "taker", lease=30)  # the holder's lease is live
            # It does not renew: its lease expires (2 s: long enough for the refusal
            # above to come first on a loaded machine), then the claim is the taker's.
            with anyio.fail_after(20):
                while True:
                    try:
                        taken = await store.claim("r1", "taker", lease=30)
                        break
                    except RunOwnedError:
                        await anyio.sleep(0.1)
            process.stdin.write("go\n")
            process.stdin.flush()
            out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=30))
            events = await store.read_all("r1")
            await store.append("r1", written(2), expected_seq=1)  # the taker's go through
            report = await store.verify("r1")
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.split() == [LeaseLostError.__name__, "1", str(taken.epoch), "taker"], (out, err)
    assert [e.body for e in events] == [MemoryWritten(key="k", value="holder")]
    assert report.ok


async def test_claims_renewals_and_releases_of_many_runs_in_one_transaction(
    tmp_path: Path,
) -> None:
    # One group commit holds 150 claims (and a run claimed, released and claimed again in
    # the same batch): the claims table ends as the requests left it, in their order,
    # whatever the count (its rows are written in multi-row statements).
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store, SqliteEventStore(path) as other:
        got: list[Claim] = []

        async def claim(i: int) -> None:
            got.append(await store.claim(f"r{i:03}", "worker-a", lease=30))

        async with anyio.create_task_group() as tg:
            for i in range(150):
                tg.start_soon(claim, i)
        assert sorted((c.run_id, c.epoch) for c in got) == [(f"r{i:03}", 1) for i in range(150)]
        by_run = {c.run_id: c for c in got}
        renewed = await store.renew([by_run[f"r{i:03}"] for i in range(0, 150, 3)], lease=60)
        assert all(c is not None and c.expires > by_run[c.run_id].expires for c in renewed)

        async def release(i: int) -> None:
            await store.release(by_run[f"r{i:03}"])

        async with anyio.create_task_group() as tg:
            for i in range(0, 150, 2):
                tg.start_soon(release, i)
            tg.start_soon(release, 1)
            tg.start_soon(claim, 1)  # queued after its release
        assert got[-1].run_id == "r001" and got[-1].epoch == 2
        for i in range(150):
            if i % 2 == 0:  # released: another store may claim it, at the next epoch
                assert (await other.claim(f"r{i:03}", "worker-b", lease=5)).epoch == 2
            else:  # still held (r001 held again, at epoch 2)
                with pytest.raises(RunOwnedError):
                    await other.claim(f"r{i:03}", "worker-b", lease=5)


def count_transactions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the writers' transactions (one WriterCore.commit each), in a one-item list."""
    from eventstore._core import WriterCore

    count = [0]
    commit = WriterCore.commit

    def counted(self: WriterCore, batch: Any) -> None:
        count[0] += 1
        commit(self, batch)

    monkeypatch.setattr(WriterCore, "commit", counted)
    return count


async def test_a_release_held_for_a_runs_final_append_commits_in_its_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transactions = count_transactions(monkeypatch)
    answers: list[str] = []
    async with SqliteEventStore(tmp_path / "s.db") as a, SqliteEventStore(tmp_path / "s.db") as b:
        claim = await a.claim("r1", "worker-a", lease=30)
        await a.append("r1", written(1), expected_seq=0)
        assert a.submit_release(
            claim, lambda _, error: answers.append(f"released {error}"), with_append=1
        )
        await a.append("r0", written(0), expected_seq=0)  # another run's append
        assert answers == []  # held for r1's append
        before = transactions[0]
        done = anyio.Event()

        def appended(result: object, error: BaseException | None) -> None:
            answers.append(f"appended {error}")
            done.set()

        assert a.submit("r1", written(2), expected_seq=1, on_done=appended)
        await done.wait()
        # One transaction for both, the release answered first (the runtime then has no
        # claim left to give up when the append's answer ends the run).
        assert transactions[0] == before + 1
        assert answers == ["released None", "appended None"]
        assert (await b.claim("r1", "worker-b", lease=5)).epoch == 2
        assert [e.seq for e in await b.read_all("r1")] == [1, 2]


async def test_a_release_held_for_a_final_append_that_is_not_written_keeps_the_claim(
    tmp_path: Path,
) -> None:
    answers: list[object] = []
    async with SqliteEventStore(tmp_path / "s.db") as a, SqliteEventStore(tmp_path / "s.db") as b:
        claim = await a.claim("r1", "worker-a", lease=30)
        await a.append("r1", written(1), expected_seq=0)
        a.submit_release(claim, lambda _, error: answers.append(error), with_append=1)
        await b.append("r1", written(2), expected_seq=1)  # another store got there first
        with pytest.raises(ConcurrencyError):
            await a.append("r1", written(2), expected_seq=1)
        assert isinstance(answers[0], ConcurrencyError)  # not released: still held
        with pytest.raises(RunOwnedError):
            await b.claim("r1", "worker-b", lease=5)
        # A release held for an append at another seq goes without it, the claim held.
        a.submit_release(claim, lambda _, error: answers.append(error), with_append=1)
        await a.append("r1", written(3), expected_seq=2)
        assert isinstance(answers[1], StoreError)
        with pytest.raises(RunOwnedError):
            await b.claim("r1", "worker-b", lease=5)
        # A plain release of the run replaces a held one; the claim goes with it.
        a.submit_release(claim, lambda _, error: answers.append(error), with_append=3)
        await a.release(claim)
        assert isinstance(answers[2], StoreError)
        assert (await b.claim("r1", "worker-b", lease=5)).epoch == 2
        # A claim the store no longer holds is not given up with the append: b's stays.
        a.submit_release(claim, lambda _, error: answers.append(error), with_append=3)
        await a.append("r1", written(4), expected_seq=3)
        assert isinstance(answers[3], StoreError)
        with pytest.raises(RunOwnedError):
            await a.claim("r1", "worker-a", lease=5)
