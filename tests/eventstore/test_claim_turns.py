"""The ownership part of a SQLite writer's transactions (eventstore._sqlite_claims and
_sqlite_turn), driven through WriterCore.commit with the batches the writer thread makes:
a start's claim inserted first (meeting a claims row or not), and the lean transaction of
appends of held runs (leases extended when due, releases going with final appends, the
fence once another connection wrote)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore import Claim, LeaseLostError, RunOwnedError, StoreError
from eventstore._core import WriterCore
from eventstore._requests import AppendRequest, prepare
from eventstore._sqlite_claims import LEAN, PLAIN, WALK
from eventstore._sqlite_turn import OwnershipRequest
from runtime.events import MemoryWritten


def written(value: int) -> list[MemoryWritten]:
    return [MemoryWritten(key="k", value=value)]


def open_core(path: Path) -> WriterCore:
    core = WriterCore(str(path), "OFF")
    core.connect(True, 1024)
    return core


def claims_row(path: Path, run_id: str) -> tuple[Any, ...] | None:
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT owner, expires, epoch, draining FROM claims WHERE run_id = ?", (run_id,)
        ).fetchone()
    return None if row is None else tuple(row)


def put_row(path: Path, run_id: str, owner: str | None, expires: float | None, epoch: int) -> None:
    """A claims row written by another connection (another store or process)."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO claims (run_id, owner, expires, epoch, draining) "
            "VALUES (?, ?, ?, ?, 'n1')",
            (run_id, owner, expires, epoch),
        )


def claim(run_id: str, owner: str, *, fence: bool) -> OwnershipRequest:
    return OwnershipRequest("claim", run_id=run_id, owner=owner, lease=30, fence=fence)


def release_with(append: AppendRequest, held: Claim) -> list[Any]:
    """The batch of a final append carrying its run's release (as the writer makes it)."""
    release = OwnershipRequest("release", claims=(held,), with_append=append.expected_seq)
    append.release = release
    return [release, append]


# The rows a start's claim may meet (owner, lease expiry in seconds from the test's own
# start, epoch), and what any claim of worker-a then answers: the owner refusing it, or
# the epoch it takes. Expiries are made when the test runs, not when the module is
# imported (a suite may take longer than any lease given here).
ROWS: dict[str, tuple[tuple[str | None, float | None, int] | None, str | int]] = {
    "none": (None, 1),
    "held by another owner": (("worker-b", 300, 4), "worker-b"),
    "expired": (("worker-b", -5, 4), 5),
    "released": ((None, None, 4), 5),
    "held by the same owner": (("worker-a", 300, 4), 5),
}


@pytest.mark.parametrize("found", list(ROWS))
def test_a_starts_claim_meeting_a_claims_row_answers_as_a_claim_that_reads_it_first(
    tmp_path: Path, found: str
) -> None:
    # A start's claim (fence=True) tries its insert first; a plain claim reads the row
    # first. Whatever row they meet, both give the same answer and leave the same row.
    relative, expected = ROWS[found]
    now = time.time()
    row = None
    if relative is not None:
        owner, expires_in, epoch = relative
        row = (owner, None if expires_in is None else now + expires_in, epoch)
    answers: list[tuple[object, object]] = []
    rows = []
    for fence in (True, False):
        path = tmp_path / f"{fence}.db"
        core = open_core(path)
        try:
            if row is not None:
                put_row(path, "r1", *row)
            request = claim("r1", "worker-a", fence=fence)
            append = prepare("r1", written(1), 0)
            core.commit([request, append])
            got = request.result
            error = request.error
            answers.append(
                (
                    (got.owner, got.epoch) if isinstance(got, Claim) else None,
                    type(error).__name__ if error is not None else None,
                )
            )
            left = claims_row(path, "r1")
            rows.append(None if left is None else (left[0], left[2], left[3]))
            if fence and isinstance(expected, str):  # refused: the run's append with it
                assert isinstance(error, RunOwnedError) and error.owner == expected
                assert append.error is error and append.result is None
            elif fence:
                assert append.error is None and append.result is not None
        finally:
            core.close()
    assert answers[0] == answers[1]
    assert rows[0] == rows[1]
    if isinstance(expected, str):
        assert answers[0] == (None, "RunOwnedError")
        assert rows[0] == (row[0] if row else None, row[2] if row else None, "n1")
    else:  # taken at the next epoch, the row replaced (no draining mark left)
        assert answers[0] == (("worker-a", expected), None)
        assert rows[0] == ("worker-a", expected, None)


def test_batches_are_sorted_by_what_the_fence_must_do(tmp_path: Path) -> None:
    core = open_core(tmp_path / "s.db")
    try:
        core.commit([claim("held", "w", fence=True), prepare("held", written(1), 0)])
        fence = core.fence
        assert fence.sort([prepare("free", written(1), 0)]) == PLAIN
        assert fence.sort([prepare("held", written(2), 1)]) == LEAN
        assert fence.sort([prepare("held", written(2), 1), prepare("free", written(1), 0)]) == LEAN
        final = release_with(prepare("held", written(2), 1), Claim("held", "w", 1, 0.0))
        assert fence.sort(final) == LEAN
        unheld = release_with(prepare("free", written(1), 0), Claim("free", "w", 1, 0.0))
        assert fence.sort(unheld) == WALK  # no claim held to give up with it
        assert fence.sort([claim("x", "w", fence=False)]) == WALK
    finally:
        core.close()


def test_a_lean_transaction_extends_a_due_lease_once_and_tells_the_watchers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    core = open_core(path)
    try:
        request = OwnershipRequest("claim", run_id="r1", owner="w", lease=0.3, fence=True)
        core.commit([request, prepare("r1", written(1), 0), prepare("other", written(1), 0)])
        assert isinstance(request.result, Claim)
        first = claims_row(path, "r1")
        assert first is not None
        core.fence.watchers.append(lambda claims, since: None)
        core.commit([prepare("r1", written(2), 1)])  # not due yet: nothing extended
        assert claims_row(path, "r1") == first and not core.fence.confirmed
        time.sleep(0.12)  # past a third of the lease
        before = time.monotonic()
        batch = [prepare("r1", written(3), 2), prepare("free", written(1), 0)]
        batch.append(prepare("r1", written(4), 3))
        core.commit(batch)  # two appends of the run, one of a run not held
        assert all(request.error is None for request in batch)
        extended = claims_row(path, "r1")
        assert extended is not None and extended[1] > first[1] + 0.1
        assert list(core.fence.confirmed) == [([("r1", 1)], pytest.approx(before, abs=0.05))]
        core.fence.confirmed.clear()
        core.commit([prepare("r1", written(5), 4)])  # just extended: not due again
        assert claims_row(path, "r1") == extended and not core.fence.confirmed
    finally:
        core.close()


def test_a_final_append_in_a_lean_transaction_gives_the_claim_up(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    core = open_core(path)
    try:
        request = claim("r1", "w", fence=True)
        core.commit([request, prepare("r1", written(1), 0)])
        held = request.result
        assert isinstance(held, Claim)
        # At a seq the file contradicts: not written, so not released.
        stale = release_with(prepare("r1", written(2), 5), held)
        core.commit(stale)
        assert isinstance(stale[0].error, StoreError) and stale[1].error is not None
        assert core.fence.epochs == {"r1": 1}
        final = release_with(prepare("r1", written(2), 1), held)
        core.commit(final)
        assert final[0].error is None and final[1].error is None
        assert claims_row(path, "r1") == (None, None, 1, None)
        assert core.fence.epochs == {} and core.fence.leases == {}
        later = prepare("r1", written(3), 2)
        core.commit([later])  # no claim held: no fence
        assert later.error is None
    finally:
        core.close()


def test_a_lean_batch_meets_the_fence_once_another_connection_took_the_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    core = open_core(path)
    try:
        request = claim("r1", "w", fence=True)
        core.commit([request, prepare("r1", written(1), 0)])
        core.commit([prepare("r1", written(2), 1)])
        with sqlite3.connect(path) as conn:  # its lease ran out and another store took it
            conn.execute("UPDATE claims SET owner = 'taker', epoch = 2 WHERE run_id = 'r1'")
        batch = [prepare("r1", written(3), 2), prepare("free", written(1), 0)]
        assert core.fence.sort(batch) == LEAN  # sorted before the file is looked at
        core.commit(batch)
        lost = batch[0].error
        assert isinstance(lost, LeaseLostError)
        assert (lost.expected_epoch, lost.actual_epoch, lost.owner) == (1, 2, "taker")
        assert batch[1].error is None  # a run not held is not fenced
        # The fence stays strict, the file unchanged since: every later append raises.
        again = prepare("r1", written(3), 2)
        assert core.fence.sort([again]) == WALK
        core.commit([again])
        assert again.error is lost
    finally:
        core.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT last_seq FROM runs WHERE run_id = 'r1'").fetchone() == (2,)
