"""The mailbox and the actor lifecycle: stopping idle, busy and self-stopping actors."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from actors import (
    Actor,
    ActorRef,
    ActorStoppedError,
    ActorSystem,
    MailboxConfig,
    Message,
    Terminated,
)
from actors._mailbox import MailboxClosed, ParkedSenders, _EventWaiter

pytestmark = pytest.mark.anyio


class Item(Message, frozen=True, tag="test.mailbox.item"):
    value: int


class Hold(Message, frozen=True, tag="test.mailbox.hold"):
    pass


class Quit(Message, frozen=True, tag="test.mailbox.quit"):
    pass


class Worker(Actor):
    def __init__(self) -> None:
        self.seen: list[int] = []
        self.release = anyio.Event()
        self.stopped_calls = 0

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Hold):
            await self.release.wait()
            return "released"
        if isinstance(message, Quit):
            self.stop_self()
            return "bye"
        self.seen.append(message.value)
        return message.value

    async def on_stop(self) -> None:
        self.stopped_calls += 1


class Watcher(Actor):
    def __init__(self) -> None:
        self.notes: list[Terminated] = []
        self.got = anyio.Event()

    async def receive(self, message: Any) -> Any:
        self.notes.append(message)
        self.got.set()


async def test_stop_self_ends_the_actor_after_the_message_in_hand() -> None:
    async with ActorSystem() as system:
        watcher = Watcher()
        actor = Worker()
        ref = system.spawn(actor, watcher=system.spawn(watcher))
        await ref.tell(Hold())
        await anyio.wait_all_tasks_blocked()  # the actor is inside Hold
        results: dict[str, Any] = {}

        async def ask(key: str, message: Message) -> None:
            try:
                results[key] = await ref.ask(message)
            except ActorStoppedError as exc:
                results[key] = exc

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "quit", Quit())
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(ask, "after", Item(value=1))
            await anyio.wait_all_tasks_blocked()
            actor.release.set()
        assert results["quit"] == "bye"
        assert isinstance(results["after"], ActorStoppedError)  # queued behind Quit: dropped
        assert actor.seen == []
        assert ref.stopped and actor.stopped_calls == 1
        with anyio.fail_after(5):
            await watcher.got.wait()
        assert watcher.notes == [Terminated(actor=ref.name, error=None)]


async def test_stopping_an_idle_actor_runs_on_stop_and_tells_its_watcher() -> None:
    async with ActorSystem() as system:
        watcher = Watcher()
        actor = Worker()
        ref = system.spawn(actor, watcher=system.spawn(watcher))
        assert await ref.ask(Item(value=3)) == 3
        await anyio.wait_all_tasks_blocked()  # idle: parked on an empty mailbox
        await ref.stop()
        assert ref.stopped and ref.failure is None and actor.stopped_calls == 1
        with anyio.fail_after(5):
            await watcher.got.wait()
        assert watcher.notes == [Terminated(actor=ref.name, error=None)]
        with pytest.raises(ActorStoppedError):
            await ref.tell(Item(value=4))
        await ref.stop()  # idempotent
        assert actor.stopped_calls == 1


async def test_stop_nowait_cancels_the_message_in_flight_without_waiting() -> None:
    async with ActorSystem() as system:
        actor = Worker()
        ref = system.spawn(actor)
        outcome: list[Any] = []

        async def ask_hold() -> None:
            try:
                outcome.append(await ref.ask(Hold()))
            except ActorStoppedError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask_hold)
            await anyio.wait_all_tasks_blocked()
            ref.stop_nowait()
            assert not ref.stopped  # its task has not run its shutdown yet
            with anyio.fail_after(5):
                await ref.wait_stopped()
        assert ref.stopped
        assert len(outcome) == 1 and isinstance(outcome[0], ActorStoppedError)
        assert not actor.release.is_set()  # Hold never finished: it was cancelled


async def test_stopping_an_actor_before_its_task_ran_drops_what_was_queued() -> None:
    async with ActorSystem() as system:
        actor = Worker()
        ref = system.spawn(actor)
        ref.tell_nowait(Item(value=1))  # queued; the actor's task has not run yet
        await ref.stop()
        assert ref.stopped and ref.failure is None
        assert actor.seen == []
        assert actor.stopped_calls == 1


async def test_senders_parked_on_a_full_mailbox_get_in_in_the_order_they_parked() -> None:
    async with ActorSystem() as system:
        actor = Worker()
        ref = system.spawn(actor, mailbox=MailboxConfig(capacity=1))
        await ref.tell(Hold())
        await anyio.wait_all_tasks_blocked()
        await ref.tell(Item(value=0))  # fills the mailbox
        async with anyio.create_task_group() as tg:
            for i in range(1, 6):
                tg.start_soon(ref.tell, Item(value=i))
                await anyio.wait_all_tasks_blocked()  # each parks in turn
            assert ref.statistics().queued == 1
            actor.release.set()
        assert await ref.ask(Item(value=6)) == 6
        assert actor.seen == [0, 1, 2, 3, 4, 5, 6]


async def test_a_cancelled_parked_sender_leaves_its_message_unsent() -> None:
    async with ActorSystem() as system:
        actor = Worker()
        ref = system.spawn(actor, mailbox=MailboxConfig(capacity=1))
        await ref.tell(Hold())
        await anyio.wait_all_tasks_blocked()
        await ref.tell(Item(value=0))
        with anyio.move_on_after(0.01) as scope:
            await ref.tell(Item(value=99))  # parks: the mailbox is full
        assert scope.cancelled_caught
        actor.release.set()
        assert await ref.ask(Item(value=1)) == 1
        assert actor.seen == [0, 1]


async def test_a_stopped_actor_is_freed_without_the_cyclic_collector() -> None:
    async with ActorSystem() as system:
        actor = Worker()
        alive = weakref.ref(actor)
        ref = system.spawn(actor)
        del actor
        assert await ref.ask(Item(value=1)) == 1
        gc.disable()
        try:
            await ref.stop()
            await anyio.wait_all_tasks_blocked()  # let its task finish
            assert alive() is None, "the actor's state outlived its stop"
        finally:
            gc.enable()


async def test_a_sender_parked_on_a_full_mailbox_is_refused_when_the_actor_stops() -> None:
    async with ActorSystem() as system:
        actor = Worker()
        ref = system.spawn(actor, mailbox=MailboxConfig(capacity=1))
        await ref.tell(Hold())
        await anyio.wait_all_tasks_blocked()
        await ref.tell(Item(value=0))  # fills the mailbox
        refused: list[BaseException] = []

        async def parked() -> None:
            try:
                await ref.tell(Item(value=1))
            except ActorStoppedError as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(parked)
            await anyio.wait_all_tasks_blocked()  # parked: the mailbox is full
            await ref.stop()
        assert len(refused) == 1 and ref.stopped
        assert actor.seen == []  # Hold was cancelled; the queued and parked items dropped


class Lazy(Actor):
    """An actor handled in its senders' tasks, which never queues a message while idle."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def receive_now(self, message: Any) -> bool:
        self.seen.append(message.value)
        return True


async def test_an_actor_s_reference_is_its_mailbox_and_holds_no_container_until_one_queues() -> (
    None
):
    # What the cyclic collector walks per live actor: the reference holds the mailbox
    # itself, and its queue is made only when a message is queued.
    async with ActorSystem() as system:
        watcher = system.spawn(Watcher())
        actor = Lazy()
        ref = system.spawn(actor, watcher=watcher)
        await ref.tell(Item(value=1))
        ref.tell_nowait(Item(value=2))
        assert actor.seen == [1, 2]
        held = [o for o in gc.get_referents(ref) if gc.is_tracked(o) and o is not ActorRef]
        assert sorted(map(id, held)) == sorted(map(id, [actor, system, watcher]))
        assert ref.statistics().queued == 0


async def test_the_mailbox_wakes_its_one_consumer_once_per_wait_and_when_it_closes() -> None:
    async with ActorSystem() as system:
        ref = system.spawn(Lazy())  # idle and taskless: the test is its mailbox's consumer
        waiter = ref._arrival()
        assert ref._arrival() is waiter  # one wake-up while nothing has arrived
        assert not waiter.done()
        assert ref._put_nowait(Item(value=7))
        assert waiter.done()
        await waiter
        assert ref._take() == Item(value=7)
        assert ref._take() is None

        with anyio.move_on_after(0.01):
            await ref._arrival()  # a cancelled wait leaves a fresh one for the next
        second = ref._arrival()
        assert second is not waiter and not second.done()
        assert ref._put_nowait(Item(value=8))
        ref._close()
        await second
        assert ref._take() is None  # closed: nothing more is handed out, ever
        with pytest.raises(MailboxClosed):
            ref._arrival()
        with pytest.raises(MailboxClosed):
            ref._put_nowait(Item(value=9))
        ref._fail_unanswered()  # what the stop does with what stayed queued
        assert ref.statistics().queued == 0


async def test_parked_senders_get_in_in_order_skipping_withdrawn_ones_until_refused() -> None:
    senders: ParkedSenders[int] = ParkedSenders()
    items: list[int] = []
    outcome: dict[int, str] = {}

    async def park(value: int) -> None:
        try:
            await senders.wait(value)
            outcome[value] = "in"
        except MailboxClosed:
            outcome[value] = "refused"

    async with anyio.create_task_group() as tg:
        for value in (1, 2, 3, 4):
            tg.start_soon(park, value)
            await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await senders.wait(5)  # cancelled: withdrawn
        senders.admit(items)
        await anyio.wait_all_tasks_blocked()
        senders.admit(items)
        await anyio.wait_all_tasks_blocked()
        senders.refuse()
    assert items == [1, 2]
    assert outcome == {1: "in", 2: "in", 3: "refused", 4: "refused"}
    senders.admit(items)  # nobody is left parked
    assert items == [1, 2]


async def test_an_event_waiter_is_a_one_shot_wake_up_for_other_anyio_backends() -> None:
    waiter = _EventWaiter()  # what new_waiter gives when no asyncio loop runs
    woken: list[bool] = []

    async def wait() -> None:
        await waiter
        woken.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        assert not waiter.done() and woken == []
        waiter.set_result(None)
    assert waiter.done() and woken == [True]
