"""Actor.receive_now: a told message is handled in the sender's task when the actor is
idle, and queued for receive (in order) whenever that would break a mailbox guarantee."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from actors import Actor, ActorStoppedError, ActorSystem, Message, Terminated

pytestmark = pytest.mark.anyio


class Item(Message, frozen=True, tag="now.item"):
    value: int


class Handoff(Actor):
    """Handles even values synchronously, odd ones (and all while ``slow``) in receive."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self.busy = False
        self.release = anyio.Event()
        self.slow = False

    def receive_now(self, message: Any) -> bool:
        assert not self.busy, "receive_now ran while receive was running"
        if message.value % 2:
            return False
        self.log.append(("now", message.value))
        return True

    async def receive(self, message: Any) -> Any:
        self.busy = True
        try:
            if self.slow:
                await self.release.wait()
            self.log.append(("receive", message.value))
        finally:
            self.busy = False


async def _idle(ref: Any) -> None:
    for _ in range(20):  # let the actor's task run and park on its empty mailbox
        await anyio.lowlevel.checkpoint()


async def test_an_idle_actor_takes_a_told_message_in_the_senders_task() -> None:
    actor = Handoff()
    async with ActorSystem() as system:
        ref = system.spawn(actor)
        await _idle(ref)
        ref.tell_nowait(Item(value=2))
        assert actor.log == [("now", 2)]  # before tell_nowait returned
        await ref.tell(Item(value=4))
        assert actor.log == [("now", 2), ("now", 4)]
        ref.tell_nowait(Item(value=1))  # declined: queued for receive
        await _idle(ref)
        assert actor.log[-1] == ("receive", 1)
        stats = ref.statistics()
        assert stats.received == stats.processed == 3


async def test_a_busy_actor_gets_its_messages_in_order_through_its_mailbox() -> None:
    actor = Handoff()
    actor.slow = True
    async with ActorSystem() as system:
        ref = system.spawn(actor)
        await _idle(ref)
        ref.tell_nowait(Item(value=1))  # declined: receive starts and waits
        await _idle(ref)
        assert actor.busy
        ref.tell_nowait(Item(value=2))  # busy: queued, not handled now
        ref.tell_nowait(Item(value=3))
        assert actor.log == []
        actor.slow = False
        actor.release.set()
        await _idle(ref)
        assert actor.log == [("receive", 1), ("receive", 2), ("receive", 3)]


async def test_a_stopped_actor_refuses_instead_of_handling_now() -> None:
    actor = Handoff()
    async with ActorSystem() as system:
        ref = system.spawn(actor)
        await _idle(ref)
        await ref.stop()
        with pytest.raises(ActorStoppedError):
            ref.tell_nowait(Item(value=2))
    assert actor.log == []


async def test_an_actor_that_stops_itself_in_receive_now_stops_at_once() -> None:
    # Its handler ran in the sender's task and it has no message queued: it is still
    # stopped (watchers told, further messages refused) without waiting for another.
    class Quitter(Handoff):
        def receive_now(self, message: Any) -> bool:
            self.stop_self()
            return True

    class Watcher(Actor):
        def __init__(self) -> None:
            self.notes: list[Terminated] = []
            self.got = anyio.Event()

        async def receive(self, message: Any) -> Any:
            self.notes.append(message)
            self.got.set()

    async with ActorSystem() as system:
        watcher = Watcher()
        ref = system.spawn(Quitter(), name="quitter", watcher=system.spawn(watcher))
        ref.tell_nowait(Item(value=2))
        with anyio.fail_after(5):
            await ref.wait_stopped()
            await watcher.got.wait()
        assert watcher.notes == [Terminated(actor="quitter", error=None)]
        with pytest.raises(ActorStoppedError):
            ref.tell_nowait(Item(value=4))


class Lane(Actor):
    """An actor whose on_stop has work only while ``in_flight`` (Actor.stop_waits)."""

    def __init__(self, in_flight: bool) -> None:
        self.in_flight = in_flight
        self.calls: list[str] = []

    def receive_now(self, message: Any) -> bool:
        return True

    def stop_waits(self) -> bool:
        return self.in_flight

    async def on_stop(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.calls.append("on_stop")

    def on_stopped(self) -> None:
        self.calls.append("on_stopped")


class Notes(Actor):
    def __init__(self) -> None:
        self.notes: list[Terminated] = []

    async def receive(self, message: Any) -> Any:
        self.notes.append(message)


@pytest.mark.parametrize("in_flight", [False, True])
async def test_an_idle_actor_whose_on_stop_has_nothing_to_wait_for_stops_at_once(
    in_flight: bool,
) -> None:
    async with ActorSystem() as system:
        notes = Notes()
        watcher = system.spawn(notes)
        actor = Lane(in_flight)
        ref = system.spawn(actor, watcher=watcher)
        await ref.tell(Item(value=2))  # handled now: the actor never had a task
        ref.stop_nowait()
        # Without work for on_stop, the stop is complete on return: on_stop skipped,
        # on_stopped run, the watcher told. With work, a task of its own runs on_stop.
        assert ref.stopped is not in_flight
        with anyio.fail_after(5):
            await ref.wait_stopped()
            while not notes.notes:
                await anyio.lowlevel.checkpoint()
        assert actor.calls == (["on_stop", "on_stopped"] if in_flight else ["on_stopped"])
        assert notes.notes == [Terminated(actor=ref.name, error=None)]
        with pytest.raises(ActorStoppedError):
            await ref.tell(Item(value=4))


async def test_a_stopping_watcher_is_told_no_termination() -> None:
    async with ActorSystem() as system:
        notes = Notes()
        watcher = system.spawn(notes)
        ref = system.spawn(Lane(False), watcher=watcher)
        watcher._stop_requested = True  # as stop_self sets it, in the watcher's handler
        ref.stop_nowait()
        assert ref.stopped and watcher.statistics().queued == 0
