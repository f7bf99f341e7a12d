"""Event types: stable tags, encoding round trips, upcasting and the hash chain."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest
from hypothesis import given, settings

from eventstore import (
    EVENT_TYPES,
    EventBody,
    SqliteEventStore,
    UnknownEventError,
    chain_hash,
    decode_body,
    encode_body,
    event_tag,
    register_event_type,
    register_upcaster,
)
from eventstore._format import store_body
from runtime.events import NodeStarted, RunStarted

from .strategies import BODY_STRATEGIES, bodies, catalogue_covered

pytestmark = pytest.mark.anyio


class Note(EventBody, frozen=True, tag="test.note"):
    """A test event at schema version 2: version 1 had no ``author``."""

    schema_version: ClassVar[int] = 2
    text: str
    author: str


def _note_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "author": "unknown"}


def _memo_v1_to_note_v2(data: dict[str, Any]) -> dict[str, Any]:
    # An older release called it "test.memo" with a "body" field.
    return {"type": "test.note", "text": data["body"], "author": "memo"}


register_event_type(Note)
register_upcaster("test.note", 1, _note_v1_to_v2)
register_upcaster("test.memo", 1, _memo_v1_to_note_v2)


def test_every_catalogue_type_has_an_explicit_dotted_tag() -> None:
    assert catalogue_covered()
    assert len(EVENT_TYPES) >= 20
    for tag, cls in EVENT_TYPES.items():
        assert event_tag(cls) == tag
        assert "." in tag and tag != cls.__name__
        assert cls.schema_version >= 1


def test_stored_form_uses_the_tag_not_the_class_name() -> None:
    data = encode_body(NodeStarted(node_id="a", visit=1))
    assert msgspec.json.decode(data) == {
        "type": "node.started",
        "node_id": "a",
        "visit": 1,
        "attempt": 1,  # defaults are written: a changed default must not rewrite history
        "branch": None,
    }


@settings(max_examples=200, deadline=None)
@given(bodies)
def test_every_event_type_round_trips_through_encode_and_decode(body: EventBody) -> None:
    cls = type(body)
    assert decode_body(event_tag(body), cls.schema_version, encode_body(body)) == body


@pytest.mark.parametrize("cls", list(BODY_STRATEGIES), ids=lambda c: event_tag(c))
def test_each_type_has_a_round_trip_strategy(cls: type[EventBody]) -> None:
    @settings(max_examples=10, deadline=None, database=None)
    @given(BODY_STRATEGIES[cls])
    def check(body: EventBody) -> None:
        assert type(body) is cls
        assert decode_body(event_tag(cls), cls.schema_version, encode_body(body)) == body

    check()


def test_an_older_version_is_upcast_on_decode() -> None:
    assert decode_body("test.note", 1, b'{"type":"test.note","text":"hi"}') == Note(
        text="hi", author="unknown"
    )
    assert decode_body("test.memo", 1, b'{"type":"test.memo","body":"yo"}') == Note(
        text="yo", author="memo"
    )


def test_an_unknown_tag_or_version_is_refused() -> None:
    with pytest.raises(UnknownEventError) as caught:
        decode_body("no.such", 1, b'{"type":"no.such"}')
    assert (caught.value.tag, caught.value.version) == ("no.such", 1)
    with pytest.raises(UnknownEventError):
        decode_body("test.note", 3, b'{"type":"test.note","text":"x","author":"y"}')
    with pytest.raises(msgspec.DecodeError):
        decode_body("node.started", 1, b"{not json")


def test_a_tag_cannot_be_registered_twice() -> None:
    class Impostor(EventBody, frozen=True, tag="node.started"):
        node_id: str

    with pytest.raises(ValueError):
        register_event_type(Impostor)
    assert register_event_type(Note) is Note  # re-registering the same class is fine
    with pytest.raises(ValueError):
        register_upcaster("test.note", 1, _memo_v1_to_note_v2)


def test_chain_hash_covers_every_field() -> None:
    base = ("", "r1", 1, "node.started", 1, b"{}")
    h = chain_hash(*base)
    assert h == chain_hash(*base) and len(h) == 64
    variants = [
        (h, "r1", 1, "node.started", 1, b"{}"),
        ("", "r2", 1, "node.started", 1, b"{}"),
        ("", "r1", 2, "node.started", 1, b"{}"),
        ("", "r1", 1, "node.done", 1, b"{}"),
        ("", "r1", 1, "node.started", 2, b"{}"),
        ("", "r1", 1, "node.started", 1, b"{ }"),
    ]
    assert len({chain_hash(*v) for v in variants} | {h}) == 7


async def test_a_v1_event_in_the_store_is_read_as_v2(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteEventStore(path) as store:
        first = await store.append(
            "r1", [RunStarted(graph={}, graph_hash="g", entry="a")], expected_seq=0
        )
    # What an older release wrote: a v1 "test.note" body, properly chained.
    body = b'{"type":"test.note","text":"written long ago"}'
    digest = chain_hash(first.last_hash, "r1", 2, "test.note", 1, body)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO events (position, run, seq, ts, type, version, hash, body) "
        "VALUES (2, 1, 2, 0.0, 'test.note', 1, ?, ?)",
        (bytes.fromhex(digest), store_body(body, "test.note")),
    )
    conn.commit()
    conn.close()
    async with SqliteEventStore(path) as store:
        events = await store.read_all("r1")
        report = await store.verify("r1")
        await store.append("r1", [Note(text="new", author="me")], expected_seq=2)
        latest = await store.read_all("r1")
    assert events[1].body == Note(text="written long ago", author="unknown")
    assert events[1].version == 1  # the envelope says how it was stored
    assert events[1].hash == digest
    assert report.ok and report.checked == 2  # upcasting does not break the chain
    assert latest[2].version == 2 and latest[2].body == Note(text="new", author="me")


@pytest.mark.parametrize("size", [0, 1, 2000, 2047, 2048, 4095, 4096, 100_000])
def test_chain_digest_is_sha256_of_header_and_body_whatever_the_size(size: int) -> None:
    # Bodies of 2 KB and more are hashed in pieces (so hashlib keeps the GIL): the digest
    # must still be the plain sha256 of the msgpack header followed by the body.
    import hashlib
    import os

    from eventstore._events import chain_digest

    body = os.urandom(size)
    header = msgspec.msgpack.encode((b"\x01" * 32, "run-1", 7, "memory.written", 2))
    expected = hashlib.sha256(header + body).digest()
    assert chain_digest(b"\x01" * 32, "run-1", 7, "memory.written", 2, body) == expected


def test_a_batchs_digests_chain_each_event_to_the_one_before() -> None:
    # chain_digests (the writer's, one call per batch) gives what chain_digest gives
    # event by event, from the digest before the batch and the batch's first seq.
    from eventstore._events import chain_digest, chain_digests

    tags = ["node.started", "memory.written", "node.completed"]
    versions = [1, 2, 1]
    bodies = [b'{"a":1}', b"", b"x" * 3000]
    prev = b"\x07" * 32
    expected = []
    for offset, (tag, version, body) in enumerate(zip(tags, versions, bodies, strict=True)):
        prev = chain_digest(prev, "run-1", 5 + offset, tag, version, body)
        expected.append(prev)
    assert chain_digests(b"\x07" * 32, "run-1", 5, tags, versions, bodies) == expected
    assert chain_digests(b"", "run-1", 1, tags[:1], versions[:1], bodies[:1]) == [
        chain_digest(b"", "run-1", 1, tags[0], versions[0], bodies[0])
    ]


class Opened(EventBody, frozen=True, tag="test.opened"):
    """An application's own lifecycle event: the store learns its listing effect by hook."""

    label: str


register_event_type(Opened, run_index=lambda body: (f"open:{body.label}", f"h-{body.label}"))


async def test_a_registered_run_index_hook_sets_the_listing(tmp_path: Path) -> None:
    async with SqliteEventStore(tmp_path / "hook.db") as store:
        await store.append("r1", [Note(text="a", author="b")], expected_seq=0)
        info = await store.get_run("r1")
        assert info is not None and info.status == "new" and info.graph_hash is None
        await store.append("r1", [Opened(label="x")], expected_seq=1)
        info = await store.get_run("r1")
        assert info is not None and (info.status, info.graph_hash) == ("open:x", "h-x")
        assert [r.run_id for r in await store.list_runs(status="open:x")] == ["r1"]
