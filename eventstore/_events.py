"""Event types: the bodies of the log (a tagged union with stable tags), the stored envelope,
their encoding, upcasting of older schema versions, and the per-run hash chain.

A body's identity on disk is its tag (``"node.started"``) and its schema version, never its
class name. Each body class declares ``schema_version``; when a body's shape changes, bump
it and register an upcaster from the previous version with :func:`register_upcaster`, so
logs written by older releases still replay.
"""

from __future__ import annotations

from collections.abc import Callable
from hashlib import sha256 as _sha256
from typing import Any, ClassVar

import msgspec

from ._errors import UnknownEventError

__all__ = [
    "EVENT_TYPES",
    "AnyEvent",
    "BranchesForked",
    "BranchesJoined",
    "ConversationCompacted",
    "EdgeTaken",
    "Event",
    "EventBody",
    "InputInjected",
    "LlmTurn",
    "MemoryWritten",
    "MessageAdded",
    "NodeCompleted",
    "NodeFailed",
    "NodeStarted",
    "OutputSet",
    "RunCancelled",
    "RunFinished",
    "RunPaused",
    "RunResumed",
    "RunStarted",
    "StallDetected",
    "ToolCallRecord",
    "ToolResult",
    "Upcaster",
    "Verdict",
    "chain_digest",
    "chain_hash",
    "decode_body",
    "encode_body",
    "event_tag",
    "register_event_type",
    "register_upcaster",
]


class EventBody(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event body. Subclasses set an explicit ``tag`` and ``schema_version``."""

    schema_version: ClassVar[int] = 1


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call the model asked for in a turn."""

    id: str
    name: str
    arguments: dict[str, Any]


class RunStarted(EventBody, frozen=True, tag="run.started"):
    """A run began. ``graph`` is its spec as builtins; the runtime records the compact form
    (fields at their default left out) and ``graph_hash`` hashes the full canonical form."""

    graph: dict[str, Any]
    graph_hash: str
    entry: str
    goal: dict[str, Any] | None = None
    input: dict[str, Any] = {}


class NodeStarted(EventBody, frozen=True, tag="node.started"):
    """The node_start checkpoint. ``visit`` is 1 for the node's first visit in the run."""

    node_id: str
    visit: int
    attempt: int = 1
    branch: str | None = None


class LlmTurn(EventBody, frozen=True, tag="llm.turn"):
    node_id: str
    iteration: int
    text: str
    tool_calls: list[ToolCallRecord]
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    model: str = ""


class ToolResult(EventBody, frozen=True, tag="tool.result"):
    node_id: str
    call_id: str
    name: str
    content: str
    is_error: bool = False


class MessageAdded(EventBody, frozen=True, tag="conversation.message"):
    """A message put into the conversation (``role``: user, system or assistant)."""

    node_id: str
    role: str
    content: str
    kind: str = "user"


class ConversationCompacted(EventBody, frozen=True, tag="conversation.compacted"):
    """The first ``upto`` conversation entries were replaced by ``summary``."""

    node_id: str
    upto: int
    summary: str


class OutputSet(EventBody, frozen=True, tag="output.set"):
    node_id: str
    key: str
    value: Any


class Verdict(EventBody, frozen=True, tag="judge.verdict"):
    node_id: str
    iteration: int
    action: str
    level: str
    feedback: str = ""
    confidence: float | None = None
    error: str | None = None


class StallDetected(EventBody, frozen=True, tag="node.stalled"):
    node_id: str
    iteration: int
    signature: str


class MemoryWritten(EventBody, frozen=True, tag="memory.written"):
    """A write to shared memory; ``op`` is replace, append or merge."""

    key: str
    value: Any
    op: str = "replace"
    node_id: str | None = None
    branch: str | None = None


class NodeCompleted(EventBody, frozen=True, tag="node.completed"):
    """The node_complete checkpoint."""

    node_id: str
    branch: str | None = None


class NodeFailed(EventBody, frozen=True, tag="node.failed"):
    node_id: str
    error: str
    error_type: str
    attempt: int
    will_retry: bool
    branch: str | None = None


class EdgeTaken(EventBody, frozen=True, tag="edge.taken"):
    source: str
    target: str
    edge_index: int
    condition: str
    reason: str = ""


class BranchesForked(EventBody, frozen=True, tag="branches.forked"):
    source: str
    targets: list[str]
    join: str | None
    policy: str


class BranchesJoined(EventBody, frozen=True, tag="branches.joined"):
    join: str | None
    completed: list[str]
    failed: list[str]


class RunPaused(EventBody, frozen=True, tag="run.paused"):
    """``reason``: hitl, user or input."""

    reason: str
    node_id: str | None


class InputInjected(EventBody, frozen=True, tag="input.injected"):
    data: dict[str, Any]


class RunResumed(EventBody, frozen=True, tag="run.resumed"):
    note: str = ""


class RunCancelled(EventBody, frozen=True, tag="run.cancelled"):
    node_id: str | None
    reason: str = ""


class RunFinished(EventBody, frozen=True, tag="run.finished"):
    """``status``: completed or failed; ``quality``: clean, degraded or failed."""

    status: str
    quality: str
    total_retries: int = 0
    error: str | None = None
    goal_outcome: dict[str, Any] | None = None


AnyEvent = (
    RunStarted
    | NodeStarted
    | LlmTurn
    | ToolResult
    | MessageAdded
    | ConversationCompacted
    | OutputSet
    | Verdict
    | StallDetected
    | MemoryWritten
    | NodeCompleted
    | NodeFailed
    | EdgeTaken
    | BranchesForked
    | BranchesJoined
    | RunPaused
    | InputInjected
    | RunResumed
    | RunCancelled
    | RunFinished
)


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


def register_event_type(cls: type[EventBody]) -> type[EventBody]:
    """Add a body class to the catalogue (usable as a class decorator); returns ``cls``.

    Raises ValueError if another class already holds its tag.
    """
    tag = event_tag(cls)
    existing = EVENT_TYPES.get(tag)
    if existing is not None and existing is not cls:
        raise ValueError(f"event tag {tag!r} is already registered to {existing.__qualname__}")
    EVENT_TYPES[tag] = cls
    _DECODERS[tag] = msgspec.json.Decoder(cls)
    return cls


def register_upcaster(tag: str, from_version: int, upcaster: Upcaster) -> None:
    """Register how to lift the data of ``tag`` at ``from_version`` to ``from_version + 1``.

    Raises ValueError if one is already registered for that (tag, version).
    """
    key = (tag, from_version)
    if key in _UPCASTERS and _UPCASTERS[key] is not upcaster:
        raise ValueError(f"an upcaster for {tag!r} version {from_version} is already registered")
    _UPCASTERS[key] = upcaster


for _cls in AnyEvent.__args__:
    register_event_type(_cls)


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


_HASH_CHUNK = 2047  # below hashlib's 2,048-byte threshold for releasing the GIL


def chain_digest(
    prev_digest: bytes, run_id: str, seq: int, tag: str, version: int, body: bytes
) -> bytes:
    """The raw sha256 of one event; ``prev_digest`` is the previous event's (b"" for seq 1)."""
    # The header is a msgpack array, self-delimiting, so header + body is unambiguous.
    header = _HEADER_ENCODER.encode((prev_digest, run_id, seq, tag, version))
    data = header + body
    if len(data) < _HASH_CHUNK:
        return _sha256(data).digest()
    # hashlib gives up the GIL while hashing 2 KB or more; the writer thread would then
    # wait for the GIL again (up to the switch interval while the event loop is busy) for
    # a few microseconds of hashing. Smaller pieces keep it: the digest is the same.
    digest = _sha256()
    view = memoryview(data)
    for start in range(0, len(data), _HASH_CHUNK):
        digest.update(view[start : start + _HASH_CHUNK])
    return digest.digest()


def chain_hash(prev_hash: str, run_id: str, seq: int, tag: str, version: int, body: bytes) -> str:
    """The hex sha256 of one event over (prev hash, run_id, seq, tag, version, body bytes).

    ``prev_hash`` is the previous event's hex hash ("" for seq 1).
    """
    return chain_digest(bytes.fromhex(prev_hash), run_id, seq, tag, version, body).hex()
