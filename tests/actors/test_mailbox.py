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
    ActorStoppedError,
    ActorSystem,
    MailboxConfig,
    Message,
    Terminated,
)
from actors._mailbox import Mailbox, MailboxClosed

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


async def test_a_mailbox_made_outside_an_event_loop_waits_on_anyio_events() -> None:
    mailbox: Mailbox[Item] = await anyio.to_thread.run_sync(Mailbox, 1)  # no loop there
    got: list[Item] = []

    async def consume() -> None:
        got.append(await mailbox.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.wait_all_tasks_blocked()  # parked on an empty mailbox
        assert mailbox.consumer_waiting
        assert mailbox.put_nowait(Item(value=1))
        await anyio.wait_all_tasks_blocked()
        assert mailbox.put_nowait(Item(value=2))
        assert not mailbox.put_nowait(Item(value=3))  # full
        parked_result: list[BaseException] = []

        async def parked_put() -> None:
            try:
                await mailbox.put(Item(value=4))
            except MailboxClosed as exc:
                parked_result.append(exc)

        tg.start_soon(parked_put)
        await anyio.wait_all_tasks_blocked()
        mailbox.close()
    assert got == [Item(value=1)]
    assert len(parked_result) == 1  # refused by close
    with pytest.raises(MailboxClosed):
        await mailbox.get()  # closed: nothing more is handed out
    assert mailbox.drain() == [Item(value=2)]


async def test_arrival_completes_when_an_item_is_put_or_the_mailbox_closes() -> None:
    box: Mailbox[int] = Mailbox(4)
    waiter = box.arrival()
    assert box.consumer_waiting
    assert box.arrival() is waiter  # one wake-up while nothing has arrived
    assert not waiter.done()
    assert box.put_nowait(7)
    assert waiter.done() and not box.consumer_waiting
    await waiter
    assert box.get_nowait() == 7
    assert box.get_nowait() is None

    second = box.arrival()
    assert second is not waiter and not second.done()
    box.close()
    assert second.done()
    await second
    assert box.get_nowait() is None  # closed: nothing more, ever
    with pytest.raises(MailboxClosed):
        box.arrival()


async def test_a_cancelled_arrival_wait_leaves_a_fresh_one_for_the_next_wait() -> None:
    box: Mailbox[int] = Mailbox(4)
    with anyio.move_on_after(0.01):
        await box.arrival()
    waiter = box.arrival()
    assert not waiter.done()
    assert box.put_nowait(1)
    await waiter
    assert box.get_nowait() == 1
