"""Run ownership on every store: exclusive claims with leases, renewals, releases, and
runnable runs handed to one claimer each."""

from __future__ import annotations

import anyio
import pytest

from eventstore import (
    Claim,
    ClaimingStore,
    ConcurrencyError,
    LeaseLostError,
    NotifyingStore,
    PostgresEventStore,
    RunOwnedError,
    StoreClosedError,
    StoreError,
)
from runtime.events import MemoryWritten, RunPaused, RunStarted

from .conftest import StoreFactory

pytestmark = pytest.mark.anyio

STARTED = RunStarted(graph={"nodes": ["a"]}, graph_hash="g", entry="a", input={})


async def test_stores_record_ownership(store_factory: StoreFactory) -> None:
    async with store_factory("s") as store:
        assert isinstance(store, ClaimingStore)


async def test_a_claim_submitted_for_a_runs_append_is_taken_with_it_or_left_to_claim(
    store_factory: StoreFactory,
) -> None:
    answers: list[object] = []
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        held = a.submit_claim(
            "r1", "worker-a", lease=5, on_done=lambda claim, error: answers.append(claim or error)
        )
        await a.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
        if held:  # taken in the append's transaction, answered before it
            claim = answers[0]
            assert isinstance(claim, Claim) and claim.owner == "worker-a"
            with pytest.raises(RunOwnedError):
                await b.claim("r1", "worker-b", lease=5)
        else:  # nothing was held: the run is nobody's until claimed
            assert answers == []
            claim = await b.claim("r1", "worker-b", lease=5)
        released: list[object] = []
        if a.submit_release(claim, lambda _, error: released.append(error)):
            await a.append("r0", [MemoryWritten(key="k", value=1)], expected_seq=0)
            assert released == [None]  # committed with the next transaction or before it
        else:
            assert released == []
            await (a if claim.owner == "worker-a" else b).release(claim)
        assert (await b.claim("r1", "worker-c", lease=5)).epoch == claim.epoch + 1
    with pytest.raises(StoreClosedError):
        a.submit_claim("r2", "worker-a", lease=5, on_done=lambda claim, error: None)
    with pytest.raises(StoreClosedError):
        a.submit_release(claim, lambda _, error: None)


async def test_only_a_store_that_announces_runnable_runs_is_a_notifying_store(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        if not isinstance(a, PostgresEventStore):
            assert not isinstance(a, NotifyingStore)
            return
        assert isinstance(a, NotifyingStore)
        signal = a.runnable_signal()
        await b.append("r1", [STARTED], expected_seq=0)  # submitted: running, unclaimed
        with anyio.fail_after(5):
            await signal.wait()
        assert a.runnable_signal() is not signal  # a new hint for the next look


async def test_a_claim_is_exclusive_until_its_lease_expires(store_factory: StoreFactory) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        first = await a.claim("r1", "worker-a", lease=0.5)
        assert (first.run_id, first.owner) == ("r1", "worker-a")
        with pytest.raises(RunOwnedError) as caught:
            await b.claim("r1", "worker-b", lease=5)
        assert caught.value.owner == "worker-a" and "worker-a" in str(caught.value)
        again = await a.claim("r1", "worker-a", lease=0.5)  # its own owner may claim again
        assert again.epoch == first.epoch + 1
        renewed = await a.renew([again], lease=0.5)
        assert renewed[0] is not None and renewed[0].expires >= again.expires
        await anyio.sleep(0.7)  # no renewal: the lease expires
        taken = await b.claim("r1", "worker-b", lease=5)
        assert taken.epoch == again.epoch + 1
        assert await a.renew([again], lease=5) == [None]  # lost
        await a.release(again)  # a stale release changes nothing
        with pytest.raises(RunOwnedError):
            await a.claim("r1", "worker-a", lease=5)
        await b.release(taken)
        assert (await a.claim("r1", "worker-a", lease=5)).epoch == taken.epoch + 1


async def test_a_claimer_skips_the_runnable_runs_it_excludes(store_factory: StoreFactory) -> None:
    async with store_factory("s") as a:
        assert isinstance(a, ClaimingStore)
        for i in range(4):
            await a.append(f"r{i}", [STARTED], expected_seq=0)  # running, no owner
        first = await a.claim_runnable("w", lease=30, limit=10, exclude=["r0", "r2", "nobody"])
        rest = await a.claim_runnable("w", lease=30, limit=10)
    assert sorted(c.run_id for c in first) == ["r1", "r3"]
    assert sorted(c.run_id for c in rest) == ["r0", "r2"]


async def test_runnable_runs_go_to_one_claimer_each(store_factory: StoreFactory) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        for i in range(30):
            await a.append(f"r{i}", [STARTED], expected_seq=0)  # running, no owner
        await a.append("paused", [STARTED, RunPaused(reason="hitl", node_id="a")], expected_seq=0)
        await a.append("other", [MemoryWritten(key="k", value=1)], expected_seq=0)  # status new
        held = await a.claim("r0", "worker-x", lease=30)  # live elsewhere: not runnable
        got: dict[str, list[Claim]] = {"a": [], "b": []}

        async def claimer(name: str, store: ClaimingStore) -> None:
            while True:
                claims = await store.claim_runnable(name, lease=30, limit=4)
                if not claims:
                    return
                got[name] += claims

        async with anyio.create_task_group() as tg:
            tg.start_soon(claimer, "a", a)
            tg.start_soon(claimer, "b", b)
        heads = await a.heads(["r1", "paused", "nobody"])
    claimed = sorted(c.run_id for c in got["a"] + got["b"])
    assert claimed == sorted(f"r{i}" for i in range(1, 30))
    assert all(c.owner == name for name in got for c in got[name])
    assert held.run_id not in claimed
    assert heads == {"r1": 1, "paused": 2}


async def test_an_append_after_a_takeover_fails_on_the_claim_epoch_and_writes_nothing(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        first = await a.claim("r1", "worker-a", lease=0.5)
        await a.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
        await anyio.sleep(0.7)  # worker-a does not renew: its lease expires
        second = await b.claim("r1", "worker-b", lease=5)
        assert second.epoch == first.epoch + 1
        # worker-a's append is at the right seq, but its claim is gone: the epoch fences it.
        with pytest.raises(LeaseLostError) as lost:
            await a.append("r1", [MemoryWritten(key="k", value=2)], expected_seq=1)
        assert (lost.value.expected_epoch, lost.value.actual_epoch) == (first.epoch, second.epoch)
        assert lost.value.owner == "worker-b" and lost.value.run_id == "r1"
        assert [e.body for e in await b.read_all("r1")] == [MemoryWritten(key="k", value=1)]
        await b.append("r1", [MemoryWritten(key="k", value=3)], expected_seq=1)
        with pytest.raises(LeaseLostError):  # and so is every later one
            await a.append("r1", [MemoryWritten(key="k", value=4)], expected_seq=2)
        assert [e.body for e in await a.read_all("r1")] == [
            MemoryWritten(key="k", value=1),
            MemoryWritten(key="k", value=3),
        ]
        assert (await a.verify("r1")).ok
        # Appends of runs the store holds no claim on are not fenced on claims.
        await a.append("r2", [MemoryWritten(key="k", value=1)], expected_seq=0)


async def test_a_renewed_claim_keeps_its_appends_and_a_release_ends_the_fence(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        first = await a.claim("r1", "worker-a", lease=0.6)
        for seq in range(3):
            await anyio.sleep(0.3)
            renewed = await a.renew([first], lease=0.6)
            assert renewed[0] is not None and renewed[0].epoch == first.epoch
            await a.append("r1", [MemoryWritten(key="k", value=seq)], expected_seq=seq)
        with pytest.raises(RunOwnedError):  # renewed: still live
            await b.claim("r1", "worker-b", lease=5)
        await a.release(first)
        second = await b.claim("r1", "worker-b", lease=5)  # released: taken at once
        assert second.epoch == first.epoch + 1
        # worker-a gave the run up: its appends (a cancel from this process, say) are
        # checked on (run, seq) only.
        await a.append("r1", [MemoryWritten(key="k", value=9)], expected_seq=3)
        assert len(await b.read_all("r1")) == 4


async def test_the_run_listing_names_the_owner_of_a_live_claim(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        for run_id in ("held", "expiring", "released", "never"):
            await a.append(run_id, [STARTED], expected_seq=0)
        await a.claim("held", "worker-a", lease=30)
        await a.claim("expiring", "worker-a", lease=0.3)
        released = await a.claim("released", "worker-a", lease=30)
        await a.release(released)

        async def owners() -> dict[str, str | None]:
            # Read through the other store: the owner comes from the shared claims.
            listed = {r.run_id: r.owner for r in await b.list_runs()}
            running = {r.run_id: r.owner for r in await b.list_runs(status="running")}
            assert listed == running
            for run_id, owner in listed.items():
                info = await b.get_run(run_id)
                assert info is not None and info.owner == owner
            return listed

        assert await owners() == {
            "held": "worker-a",
            "expiring": "worker-a",
            "released": None,
            "never": None,
        }
        await anyio.sleep(0.5)  # no renewal: that lease expires, and the run has no owner
        assert (await owners())["expiring"] is None
        taken = await b.claim_runnable("worker-b", lease=30, limit=10)
        assert sorted(c.run_id for c in taken) == ["expiring", "never", "released"]
        assert await owners() == {
            "held": "worker-a",
            "expiring": "worker-b",
            "released": "worker-b",
            "never": "worker-b",
        }
        # The status stays the log's: a claim changes only the owner.
        assert {r.status for r in await b.list_runs()} == {"running"}


async def test_a_claim_s_draining_mark_is_listed_and_cleared_with_the_claim(
    store_factory: StoreFactory,
) -> None:
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        await a.append("r1", [STARTED, RunPaused(reason="user", node_id="a")], expected_seq=0)
        claim = await a.claim("r1", "worker-a", lease=5)
        info = await b.get_run("r1")
        assert info is not None and (info.draining, info.draining_since) == (None, None)
        assert await a.mark_draining(claim, "a, b")
        info = await b.get_run("r1")  # another store's reading of the same row
        assert info is not None and (info.owner, info.draining) == ("worker-a", "a, b")
        assert info.draining_since is not None and info.draining_since <= info.updated + 60
        page = await b.query_runs()
        assert [(r.run_id, r.draining) for r in page.runs] == [("r1", "a, b")]
        assert await a.mark_draining(claim, None)  # cleared by its owner
        info = await b.get_run("r1")
        assert info is not None and (info.draining, info.draining_since) == (None, None)
        assert await a.mark_draining(claim, "a")
        await a.release(claim)  # a release clears it
        info = await b.get_run("r1")
        assert info is not None and (info.owner, info.draining) == (None, None)
        assert not await a.mark_draining(claim, "a")  # a claim no longer held marks nothing
        again = await b.claim("r1", "worker-b", lease=5)
        info = await a.get_run("r1")
        assert info is not None and (info.owner, info.draining) == ("worker-b", None)
        await b.release(again)


async def test_appends_under_a_claim_keep_its_lease_without_renewals(
    store_factory: StoreFactory,
) -> None:
    """Each append that passes the claim's epoch fence confirms the claim: appended to more
    often than its lease, the run stays its owner's for several leases with no renewal;
    once the appends stop, the lease runs out and another owner takes the run over."""
    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        claim = await a.claim("r1", "worker-a", lease=1.5)
        for seq in range(16):  # 3.2 s, over two leases
            await a.append("r1", [MemoryWritten(key="k", value=seq)], expected_seq=seq)
            await anyio.sleep(0.2)
        with pytest.raises(RunOwnedError) as caught:
            await b.claim("r1", "worker-b", lease=5)
        assert caught.value.owner == "worker-a"
        await anyio.sleep(1.6)  # no append and no renewal: the lease runs out
        taken = await b.claim("r1", "worker-b", lease=5)
        assert taken.epoch == claim.epoch + 1
        with pytest.raises(LeaseLostError):  # an append confirms only a claim still held
            await a.append("r1", [MemoryWritten(key="k", value=16)], expected_seq=16)
        assert await a.renew([claim], lease=1.5) == [None]
        assert len(await b.read_all("r1")) == 16


async def test_a_release_held_for_a_runs_final_append_goes_with_it_if_it_is_written(
    store_factory: StoreFactory,
) -> None:
    answers: list[object] = []

    def answer(_: None, error: BaseException | None) -> None:
        answers.append(error)

    async with store_factory("s") as a, store_factory("s") as b:
        assert isinstance(a, ClaimingStore) and isinstance(b, ClaimingStore)
        claim = await a.claim("r1", "worker-a", lease=30)
        await a.append("r1", [MemoryWritten(key="k", value=1)], expected_seq=0)
        assert a.submit_release(claim, answer, with_append=1)
        await a.append("r0", [MemoryWritten(key="k", value=1)], expected_seq=0)  # another run
        assert answers == []  # held for r1's next append
        await a.append("r1", [MemoryWritten(key="k", value=2)], expected_seq=1)
        assert answers == [None]  # given up with it, answered before it
        assert (await b.claim("r1", "worker-b", lease=5)).epoch == claim.epoch + 1
        # An append that is not written takes no release along: the claim stays held.
        claim = await a.claim("r2", "worker-a", lease=30)
        await a.append("r2", [MemoryWritten(key="k", value=1)], expected_seq=0)
        assert a.submit_release(claim, answer, with_append=1)
        await b.append("r2", [MemoryWritten(key="k", value=2)], expected_seq=1)
        with pytest.raises(ConcurrencyError):
            await a.append("r2", [MemoryWritten(key="k", value=2)], expected_seq=1)
        assert isinstance(answers[1], ConcurrencyError)
        with pytest.raises(RunOwnedError):
            await b.claim("r2", "worker-b", lease=5)
        # A release held for another seq, or replaced by a plain release, goes without it.
        assert a.submit_release(claim, answer, with_append=1)
        await a.append("r2", [MemoryWritten(key="k", value=3)], expected_seq=2)
        assert isinstance(answers[2], StoreError)
        assert a.submit_release(claim, answer, with_append=3)
        await a.release(claim)
        assert isinstance(answers[3], StoreError)
        assert (await b.claim("r2", "worker-b", lease=5)).epoch == claim.epoch + 1
