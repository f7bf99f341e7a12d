from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from actors import (
    Actor,
    ActorError,
    ActorRef,
    ActorStoppedError,
    ActorSystem,
    AskTimeoutError,
    MailboxConfig,
    MailboxFullError,
    Message,
    NotAMessageError,
    Terminated,
)

pytestmark = pytest.mark.anyio


class Item(Message, frozen=True, tag="test.item"):
    value: int


class Boom(Message, frozen=True, tag="test.boom"):
    pass


class Hold(Message, frozen=True, tag="test.hold"):
    pass


class Recorder(Actor):
    """Records each message, and checks that it never handles two at once."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.active = 0
        self.max_active = 0
        self.release = anyio.Event()

    async def receive(self, message: Any) -> Any:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if isinstance(message, Boom):
                raise ValueError("boom")
            if isinstance(message, Hold):
                await self.release.wait()
                return "released"
            await anyio.lowlevel.checkpoint()  # yield so a concurrent handler would overlap
            self.seen.append(message.value)
            return message.value * 2
        finally:
            self.active -= 1


class Watcher(Actor):
    def __init__(self) -> None:
        self.notes: list[Terminated] = []
        self.got = anyio.Event()

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Terminated):
            self.notes.append(message)
            self.got.set()


async def test_messages_are_handled_in_fifo_order_one_at_a_time() -> None:
    async with ActorSystem() as system:
        actor = Recorder()
        ref = system.spawn(actor)
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(ref.tell, Item(value=i))
                await anyio.lowlevel.checkpoint()
        for i in range(50, 100):
            await ref.tell(Item(value=i))
        assert await ref.ask(Item(value=100)) == 200
        assert actor.seen == list(range(101))
        assert actor.max_active == 1


async def test_tell_waits_when_the_mailbox_is_full_and_tell_nowait_raises() -> None:
    async with ActorSystem() as system:
        actor = Recorder()
        ref = system.spawn(actor, mailbox=MailboxConfig(capacity=2))
        await ref.tell(Hold())
        await anyio.wait_all_tasks_blocked()  # the actor is now inside Hold
        await ref.tell(Item(value=1))
        await ref.tell(Item(value=2))
        with pytest.raises(MailboxFullError) as info:
            ref.tell_nowait(Item(value=3))
        assert info.value.capacity == 2
        sent = anyio.Event()

        async def blocked_sender() -> None:
            await ref.tell(Item(value=3))
            sent.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_sender)
            await anyio.wait_all_tasks_blocked()
            assert not sent.is_set(), "tell must wait while the mailbox is full"
            assert ref.statistics().queued == 2
            actor.release.set()
        assert sent.is_set()
        assert await ref.ask(Item(value=4)) == 8
        assert actor.seen == [1, 2, 3, 4]


async def test_ask_times_out_with_a_clear_error() -> None:
    async with ActorSystem() as system:
        ref = system.spawn(Recorder(), name="slow")
        with pytest.raises(AskTimeoutError) as info:
            await ref.ask(Hold(), timeout=0.05)
        assert info.value.actor == "slow"
        assert isinstance(info.value, TimeoutError)
        assert "Hold" in str(info.value)


async def test_failing_actor_stops_alone_and_its_watcher_is_told() -> None:
    async with ActorSystem() as system:
        watcher = Watcher()
        watcher_ref = system.spawn(watcher)
        sibling = system.spawn(Recorder())
        failing = system.spawn(Recorder(), name="failing", watcher=watcher_ref)
        with pytest.raises(ValueError, match="boom"):
            await failing.ask(Boom())
        with anyio.fail_after(5):
            await watcher.got.wait()
        assert watcher.notes == [Terminated(actor="failing", error="ValueError: boom")]
        assert isinstance(failing.failure, ValueError)
        assert failing.stopped
        # the sibling is untouched
        assert await sibling.ask(Item(value=21)) == 42


async def test_watching_an_already_stopped_actor_notifies_at_once() -> None:
    async with ActorSystem() as system:
        ref = system.spawn(Recorder())
        await ref.stop()
        watcher = Watcher()
        system.watch(ref, system.spawn(watcher))
        with anyio.fail_after(5):
            await watcher.got.wait()
        assert watcher.notes[0].error is None


async def test_telling_or_asking_a_stopped_actor_raises() -> None:
    async with ActorSystem() as system:
        ref = system.spawn(Recorder(), name="gone")
        await ref.stop()
        with pytest.raises(ActorStoppedError, match="gone"):
            await ref.tell(Item(value=1))
        with pytest.raises(ActorStoppedError):
            ref.tell_nowait(Item(value=1))
        with pytest.raises(ActorStoppedError):
            await ref.ask(Item(value=1))


async def test_stop_fails_the_ask_in_flight_and_queued_asks() -> None:
    async with ActorSystem() as system:
        ref = system.spawn(Recorder())
        errors: list[BaseException] = []

        async def ask(msg: Message) -> None:
            try:
                await ref.ask(msg)
            except ActorStoppedError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, Hold())
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(ask, Item(value=1))
            await anyio.wait_all_tasks_blocked()
            await ref.stop()
        assert len(errors) == 2


async def test_stopping_the_system_leaves_no_task_running() -> None:
    refs: list[ActorRef] = []
    async with ActorSystem() as system:
        for _ in range(20):
            ref = system.spawn(Recorder())
            await ref.tell(Hold())
            refs.append(ref)
        await anyio.wait_all_tasks_blocked()
        assert len(system.actors()) == 20
    # every actor task has ended (the task group has exited) and each actor is stopped
    assert all(ref.stopped for ref in refs)
    assert system.actors() == []
    with pytest.raises(ActorError):
        system.spawn(Recorder())


async def test_only_msgspec_structs_are_accepted() -> None:
    async with ActorSystem() as system:
        ref = system.spawn(Recorder())
        with pytest.raises(NotAMessageError):
            await ref.tell({"value": 1})  # type: ignore[arg-type]


async def test_messages_are_checked_by_each_way_in_after_structs_were_told() -> None:
    class NotAStruct:
        pass

    async with ActorSystem() as system:
        ref = system.spawn(Recorder())
        await ref.tell(Item(value=1))  # a Struct class told: known from now on
        ref.tell_nowait(Item(value=2))
        for message in ({"value": 1}, NotAStruct(), Item):
            with pytest.raises(NotAMessageError):
                await ref.tell(message)  # type: ignore[arg-type]
            with pytest.raises(NotAMessageError):
                ref.tell_nowait(message)  # type: ignore[arg-type]
            with pytest.raises(NotAMessageError):
                await ref.ask(message)  # type: ignore[arg-type]


async def test_on_stop_runs_and_statistics_count() -> None:
    stopped: list[str] = []

    class Closing(Recorder):
        async def on_stop(self) -> None:
            stopped.append("done")

    async with ActorSystem() as system:
        ref = system.spawn(Closing())
        for i in range(3):
            await ref.ask(Item(value=i))
        stats = ref.statistics()
        assert (stats.received, stats.processed, stats.failed) == (3, 3, False)
        await ref.stop()
    assert stopped == ["done"]


async def test_duplicate_names_are_refused() -> None:
    async with ActorSystem() as system:
        system.spawn(Recorder(), name="x")
        with pytest.raises(ActorError, match="already running"):
            system.spawn(Recorder(), name="x")


async def test_tell_later_delivers_after_the_delay_and_drops_for_a_stopped_actor() -> None:
    async with ActorSystem() as system:
        actor = Recorder()
        ref = system.spawn(actor)
        system.tell_later(ref, Item(value=7), 0.01)
        assert actor.seen == []
        arrived = anyio.Event()
        real_receive = actor.receive

        async def receive(message: Any) -> Any:
            result = await real_receive(message)
            arrived.set()
            return result

        actor.receive = receive  # type: ignore[method-assign]
        with anyio.fail_after(5):
            await arrived.wait()
        assert actor.seen == [7]
        gone = system.spawn(Recorder())
        system.tell_later(gone, Item(value=1), 0.01)
        await gone.stop()
        await anyio.sleep(0.03)  # the timer fires into a stopped actor and must not raise


async def test_leaving_the_system_waits_for_every_actor_and_cancels_timers() -> None:
    # On asyncio the actors' tasks are plain tasks the system tracks: leaving the block must
    # still stop each actor (on_stop included, even for one busy in a handler) and cancel
    # pending timers, and no task of the system may be left behind.
    import asyncio

    stopped: list[str] = []

    class Closing(Recorder):
        async def on_stop(self) -> None:
            await anyio.sleep(0.01)  # a slow on_stop: the exit must wait for it
            stopped.append("done")

    before = {t for t in asyncio.all_tasks() if not t.done()}
    async with ActorSystem() as system:
        busy = system.spawn(Closing())
        await busy.tell(Hold())  # parked in its handler when the system exits
        idle = system.spawn(Closing())
        system.tell_later(idle, Item(value=1), 60)
        await anyio.wait_all_tasks_blocked()
    assert stopped == ["done", "done"]
    assert busy.stopped and idle.stopped
    assert {t for t in asyncio.all_tasks() if not t.done()} == before


async def test_a_task_of_the_system_that_dies_is_reported_when_it_exits() -> None:
    # An actor's task handles its own errors; anything escaping it (a bug in the system
    # itself) must not vanish silently but be raised when the system exits.
    class Fatal(BaseException):
        pass

    class Broken(Recorder):
        async def on_stop(self) -> None:
            raise Fatal  # not an Exception: the actor's task does not swallow it

    with pytest.raises(BaseExceptionGroup) as info:
        async with ActorSystem() as system:
            ref = system.spawn(Broken())
            assert await ref.ask(Item(value=1)) == 2
    assert info.group_contains(Fatal)


async def test_on_stopped_runs_after_on_stop_and_its_error_is_the_failure() -> None:
    calls: list[str] = []

    class Tidy(Recorder):
        async def on_stop(self) -> None:
            calls.append("on_stop")

        def on_stopped(self) -> None:
            calls.append("on_stopped")

    class Faulty(Recorder):
        def on_stopped(self) -> None:
            raise RuntimeError("tidy-up failed")

    async with ActorSystem() as system:
        watcher = Watcher()
        tidy = system.spawn(Tidy())
        faulty = system.spawn(Faulty(), watcher=system.spawn(watcher))
        await tidy.stop()
        await faulty.stop()
        with anyio.fail_after(5):
            await watcher.got.wait()
    assert calls == ["on_stop", "on_stopped"]
    assert tidy.failure is None
    assert isinstance(faulty.failure, RuntimeError)
    assert watcher.notes[0].error == "RuntimeError: tidy-up failed"


class Slotted(Actor):
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def receive(self, message: Any) -> Any:
        self.seen.append(message.value)
        return self.ref.name


async def test_an_actor_that_declares_slots_has_no_dict_and_still_knows_its_ref() -> None:
    # The base class's ref and system are slots: a live actor need not carry a __dict__.
    actor = Slotted()
    assert not hasattr(actor, "__dict__")
    async with ActorSystem() as system:
        ref = system.spawn(actor, name="slotted")
        assert await ref.ask(Item(value=1)) == "slotted"
        assert actor.ref is ref and actor.system is system and actor.seen == [1]
