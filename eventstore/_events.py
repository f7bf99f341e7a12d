"""The event envelope, the body codec and registry, upcasting, and the per-run hash chain.

The store knows no event catalogue: an application defines its bodies as tagged
:class:`EventBody` subclasses and registers them with :func:`register_event_type` (the
runtime registers its own in ``runtime.events._catalogue``). A body's identity on disk is its tag
(``"node.started"``) and its schema version, never its class name. Each body class declares
``schema_version``; when a body's shape changes, bump it and register an upcaster from the
previous version with :func:`register_upcaster`, so logs written by older releases still
replay.

A body class may also say how it changes the run listing (:meth:`EventStore.list_runs`):
the ``run_index`` hook given to :func:`register_event_type` maps a body to a
:class:`RunIndex`: the run's new status, graph hash, graph id and quality (``None`` for
"unchanged", ``""`` for "no value"). The store only records what the hook returns, and
filters the listing on it; it gives those strings no meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from hashlib import sha256 as _sha256
from typing import Any, ClassVar, NamedTuple

import msgspec

from ._errors import UnknownEventError

__all__ = [
    "EVENT_TYPES",
    "UNCHANGED_INDEX",
    "Event",
    "EventBody",
    "RunIndex",
    "RunIndexHook",
    "Upcaster",
    "chain_digest",
    "chain_digests",
    "chain_hash",
    "decode_body",
    "encode_body",
    "event_tag",
    "register_event_type",
    "register_upcaster",
    "run_index_hook",
]


class EventBody(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event body. Subclasses set an explicit ``tag`` and ``schema_version``."""

    schema_version: ClassVar[int] = 1


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """A stored event: the envelope the store adds around a body.

    ``seq`` counts 1, 2, 3... per run without gaps; ``position`` is the store-wide commit
    order (what :meth:`EventStore.tail` follows); ``ts`` is the append time set by the store;
    ``version`` is the body's schema version as stored (the body is already upcast);
    ``hash`` is the hex sha256 chaining this event to ``prev_hash`` ("" for seq 1).
    """

    run_id: str
    seq: int
    position: int
    ts: float
    version: int
    prev_hash: str
    hash: str
    body: EventBody


#: tag -> body class, for every registered event type.
EVENT_TYPES: dict[str, type[EventBody]] = {}


class RunIndex(NamedTuple):
    """What one event changes in its run's listing row (see :func:`register_event_type`).

    Each field is the row's new value, ``None`` to leave it unchanged, or ``""`` to clear it.
    The store records these strings and filters on them (``EventStore.list_runs``); it
    gives them no meaning. A plain ``(status, graph_hash)`` pair is read as the first two.
    """

    status: str | None = None
    graph_hash: str | None = None
    graph_id: str | None = None
    quality: str | None = None
    #: The run this one's log was copied from (a fork's source), for the listing.
    origin: str | None = None


#: The RunIndex of a batch that leaves its run's listing row as it is (shared).
UNCHANGED_INDEX = RunIndex()

#: Maps a body to a :class:`RunIndex` (or a ``(status, graph_hash)`` pair); see
#: :func:`register_event_type`.
RunIndexHook = Callable[[Any], RunIndex | tuple[str | None, str | None]]

_RUN_INDEX: dict[type[EventBody], RunIndexHook] = {}

#: An upcaster turns a body's plain data at version v into the data at version v + 1. It may
#: change the ``"type"`` key to rename the tag; the chain then continues under the new tag.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_UPCASTERS: dict[tuple[str, int], Upcaster] = {}
_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {}
_HEADER_ENCODER = msgspec.msgpack.Encoder()


def event_tag(body: EventBody | type[EventBody]) -> str:
    """The stable tag of a body (or body class)."""
    cls = body if isinstance(body, type) else type(body)
    tag = cls.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{cls.__qualname__} has no string tag")
    return tag


def register_event_type(
    cls: type[EventBody], *, run_index: RunIndexHook | None = None
) -> type[EventBody]:
    """Add a body class to the catalogue (usable as a class decorator); returns ``cls``.

    ``run_index``, if given, is called with each body of this class when it is appended and
    returns a :class:`RunIndex` (or a ``(status, graph_hash)`` pair): the values the run's
    listing row takes (``None`` leaves a value unchanged, ``""`` clears it). Raises
    ValueError if another class already holds its tag.
    """
    tag = event_tag(cls)
    existing = EVENT_TYPES.get(tag)
    if existing is not None and existing is not cls:
        raise ValueError(f"event tag {tag!r} is already registered to {existing.__qualname__}")
    EVENT_TYPES[tag] = cls
    _DECODERS[tag] = msgspec.json.Decoder(cls)
    if run_index is not None:
        _RUN_INDEX[cls] = run_index
    return cls


def run_index_hook(cls: type[EventBody]) -> RunIndexHook | None:
    """The ``run_index`` hook registered for ``cls`` (None: its bodies leave the listing)."""
    return _RUN_INDEX.get(cls)


def register_upcaster(tag: str, from_version: int, upcaster: Upcaster) -> None:
    """Register how to lift the data of ``tag`` at ``from_version`` to ``from_version + 1``.

    Raises ValueError if one is already registered for that (tag, version).
    """
    key = (tag, from_version)
    if key in _UPCASTERS and _UPCASTERS[key] is not upcaster:
        raise ValueError(f"an upcaster for {tag!r} version {from_version} is already registered")
    _UPCASTERS[key] = upcaster


def encode_body(body: EventBody) -> bytes:
    """The stored bytes of a body (compact JSON, tag included)."""
    return _ENCODER.encode(body)


def decode_body(type_tag: str, version: int, data: bytes) -> EventBody:
    """Decode stored body bytes, upcasting them first if ``version`` is older than current.

    Raises UnknownEventError for a tag (or version) this release cannot read, and
    ``msgspec.DecodeError`` / ``msgspec.ValidationError`` for malformed bytes.
    """
    cls = EVENT_TYPES.get(type_tag)
    if cls is not None and version == cls.schema_version:
        body: EventBody = _DECODERS[type_tag].decode(data)
        return body
    raw = msgspec.json.decode(data)
    if not isinstance(raw, dict):
        raise msgspec.ValidationError(f"event body must be an object, got {type(raw).__name__}")
    tag, ver = type_tag, version
    while True:
        cls = EVENT_TYPES.get(tag)
        if cls is not None and ver == cls.schema_version:
            break
        upcaster = _UPCASTERS.get((tag, ver))
        if upcaster is None:
            raise UnknownEventError(tag, ver)
        raw = upcaster(dict(raw, type=tag))
        tag = raw.get("type", tag)
        ver += 1
    raw["type"] = tag
    return msgspec.convert(raw, cls)


def chain_digest(
    prev_digest: bytes, run_id: str, seq: int, tag: str, version: int, body: bytes
) -> bytes:
    """The raw sha256 of one event; ``prev_digest`` is the previous event's (b"" for seq 1)."""
    # The header is a msgpack array, self-delimiting, so header + body is unambiguous.
    header = _HEADER_ENCODER.encode((prev_digest, run_id, seq, tag, version))
    return _sha256(header + body).digest()


def chain_digests(
    prev_digest: bytes,
    run_id: str,
    first_seq: int,
    tags: Sequence[str],
    versions: Sequence[int],
    bodies: Sequence[bytes],
) -> list[bytes]:
    """The raw sha256 of each of a batch's events (seqs from ``first_seq`` on), each chained
    to the one before as :func:`chain_digest` does; ``prev_digest`` is the event's before
    the batch (b"" for seq 1). One call per batch: the writer's hot path."""
    encode, sha256 = _HEADER_ENCODER.encode, _sha256
    digests: list[bytes] = []
    seq = first_seq
    for tag, version, body in zip(tags, versions, bodies, strict=True):
        prev_digest = sha256(encode((prev_digest, run_id, seq, tag, version)) + body).digest()
        digests.append(prev_digest)
        seq += 1
    return digests


def chain_hash(prev_hash: str, run_id: str, seq: int, tag: str, version: int, body: bytes) -> str:
    """The hex sha256 of one event over (prev hash, run_id, seq, tag, version, body bytes).

    ``prev_hash`` is the previous event's hex hash ("" for seq 1).
    """
    return chain_digest(bytes.fromhex(prev_hash), run_id, seq, tag, version, body).hex()
