"""The stored form of events in a SQLite store's rows: the one codec of the file format.

What the ``events`` table holds, and the only module that knows it:

- A row's ``hash`` column holds the 32-byte (``HASH_WIDTH``) chain hash of each of its
  events, side by side, so a row holds ``len(hash) / HASH_WIDTH`` events; ``position`` and
  ``seq`` are its first event's, the others follow without gaps.
- A row of one event has the event's type tag and schema version in ``type`` and
  ``version``, and its stored body in ``body``. A row of several events (a *frame*, up to
  ``FRAME_EVENTS``) has type ``FRAME_TYPE``, version 0, and a body that is a msgpack array
  of ``[tag, version, stored body]``, one per event.
- A stored body is one *form* byte, then the payload (:class:`BodyForm`): the encoded JSON
  body without its leading ``{"type":"<tag>"`` (the row or frame item holds the tag), the
  whole encoded body, or the whole body zlib-compressed (bodies of at least
  ``COMPRESS_AT`` bytes, when that saves a tenth or more).

Hashes always cover the whole encoded body, whatever its stored form. Files written
before the form byte existed are rewritten once when opened (:func:`add_form_bytes`).
"""

from __future__ import annotations

import enum
import sqlite3
import zlib
from collections.abc import Sequence

import msgspec

__all__ = [
    "COMPRESS_AT",
    "FRAME_EVENTS",
    "FRAME_TYPE",
    "HASH_WIDTH",
    "BodyForm",
    "FormatError",
    "add_form_bytes",
    "decode_row",
    "encode_rows",
    "frame_rows",
    "load_body",
    "pack_frame",
    "store_body",
    "tag_prefix",
]

#: Bytes of one event's chain hash (SHA-256).
HASH_WIDTH = 32
#: The type column of a row holding several events (a frame); no event type has this tag.
FRAME_TYPE = ""
#: At most this many events share one row (an append of more is split into several rows).
FRAME_EVENTS = 64
#: Bodies of at least this many bytes are compressed when that saves a tenth or more.
COMPRESS_AT = 1024

#: (event count, type, version, stored body) of one row to write.
Row = tuple[int, str, int, bytes]


class BodyForm(enum.IntEnum):
    """The first byte of a stored body: how the rest of it maps back to the encoded body."""

    TAGLESS = 0  #: the encoded body without its leading '{"type":"<tag>"'
    WHOLE = 1  #: the encoded body as it is (a body whose encoding does not start so)
    ZLIB = 2  #: the encoded body, zlib-compressed


class FormatError(ValueError):
    """Stored bytes that this codec cannot read (a corrupt or foreign row)."""


#: The form bytes of the TAGLESS and WHOLE forms (see store_small).
STORED_TAGLESS = bytes([BodyForm.TAGLESS])
STORED_WHOLE = bytes([BodyForm.WHOLE])
_ZLIB = bytes([BodyForm.ZLIB])
_PREFIXES: dict[str, bytes] = {}


def tag_prefix(tag: str) -> bytes:
    """How the encoding of a ``tag`` event starts: ``{"type":"<tag>"``."""
    prefix = _PREFIXES.get(tag)
    if prefix is None:
        prefix = _PREFIXES[tag] = b'{"type":"' + tag.encode() + b'"'
    return prefix


def tagless_cut(tag: str, body: bytes) -> int:
    """How many leading bytes of ``body`` the TAGLESS form drops (0: it cannot be used)."""
    prefix = tag_prefix(tag)
    if body.startswith(prefix) and body[len(prefix) : len(prefix) + 1] in (b",", b"}"):
        return len(prefix)
    return 0


def store_small(body: bytes, cut: int) -> bytes:
    """The stored form of a body under COMPRESS_AT bytes whose tagless cut is ``cut``."""
    return STORED_TAGLESS + body[cut:] if cut else STORED_WHOLE + body


def store_body(body: bytes, tag: str) -> bytes:
    """The stored form of the encoded body of a ``tag`` event."""
    if len(body) >= COMPRESS_AT:
        packed = zlib.compress(body, 1)
        if len(packed) * 10 <= len(body) * 9:
            return _ZLIB + packed
    return store_small(body, tagless_cut(tag, body))


def load_body(stored: bytes, tag: str) -> bytes:
    """The encoded body back from its stored form. Raises FormatError if it cannot be."""
    if not stored:
        raise FormatError("an empty stored body")
    form, payload = stored[0], stored[1:]
    if form == BodyForm.TAGLESS:
        return tag_prefix(tag) + payload
    if form == BodyForm.WHOLE:
        return payload
    if form == BodyForm.ZLIB:
        try:
            return zlib.decompress(payload)
        except zlib.error as exc:
            raise FormatError(f"a corrupt compressed body: {exc}") from exc
    raise FormatError(f"an unknown body form {form}")


_FRAME_ENCODER = msgspec.msgpack.Encoder()
_FRAME_DECODER = msgspec.msgpack.Decoder(list[tuple[str, int, bytes]])


def pack_frame(tags: Sequence[str], versions: Sequence[int], stored: Sequence[bytes]) -> bytes:
    """The body of a row holding several events (each body in its stored form)."""
    return _FRAME_ENCODER.encode(list(zip(tags, versions, stored, strict=True)))


def frame_rows(tags: list[str], versions: list[int], stored: list[bytes]) -> list[Row]:
    """The rows that store one append's events, given their stored bodies. One event is a
    plain row; more share frames of up to FRAME_EVENTS events (a last frame of one event
    is a plain row)."""
    count = len(stored)
    if count == 1:
        return [(1, tags[0], versions[0], stored[0])]
    if count <= FRAME_EVENTS:  # the common case: one frame
        frame = _FRAME_ENCODER.encode(list(zip(tags, versions, stored, strict=True)))
        return [(count, FRAME_TYPE, 0, frame)]
    rows: list[Row] = []
    for start in range(0, len(stored), FRAME_EVENTS):
        end = min(start + FRAME_EVENTS, len(stored))
        if end - start == 1:
            rows.append((1, tags[start], versions[start], stored[start]))
        else:
            frame = pack_frame(tags[start:end], versions[start:end], stored[start:end])
            rows.append((end - start, FRAME_TYPE, 0, frame))
    return rows


def encode_rows(tags: list[str], versions: list[int], bodies: list[bytes]) -> list[Row]:
    """The rows that store one append's encoded ``bodies``."""
    stored = [store_body(body, tag) for body, tag in zip(bodies, tags, strict=True)]
    return frame_rows(tags, versions, stored)


def decode_row(
    row_type: str, version: int, hashes: bytes, body: bytes
) -> list[tuple[str, int, bytes, bytes]]:
    """A stored row's events as (tag, version, hash, stored body), in seq order.

    Raises FormatError for a frame that cannot be read or a row whose hashes do not match
    its events in number.
    """
    if row_type != FRAME_TYPE:
        if len(hashes) != HASH_WIDTH:
            raise FormatError(f"a row of one event with {len(hashes)} bytes of hashes")
        return [(row_type, version, hashes, body)]
    try:
        items = _FRAME_DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise FormatError(f"undecodable frame: {exc}") from exc
    if not items or len(hashes) != HASH_WIDTH * len(items):
        raise FormatError(f"a frame of {len(items)} events with {len(hashes)} bytes of hashes")
    width = HASH_WIDTH
    return [
        (tag, item_version, hashes[width * i : width * i + width], stored)
        for i, (tag, item_version, stored) in enumerate(items)
    ]


def _legacy_form(stored: bytes) -> bytes:
    """A body stored before the form byte, with it: those forms were told apart by their
    first byte (zlib streams start with "x", tagless bodies with "," or "}", whole ones
    with "{")."""
    first = stored[:1]
    if first == b"x":
        return _ZLIB + stored
    if first in (b",", b"}"):
        return STORED_TAGLESS + stored
    return STORED_WHOLE + stored


def add_form_bytes(conn: sqlite3.Connection) -> None:
    """Give every stored body of the file its form byte (inside the caller's transaction).

    For files written before the form byte (schema versions below 5); hashes are unchanged.
    A row that cannot be read is left as it is (verify reports it).
    """
    after = 0
    while True:
        rows = conn.execute(
            "SELECT position, type, body FROM events WHERE position > ? ORDER BY position "
            "LIMIT 1000",
            (after,),
        ).fetchall()
        if not rows:
            return
        updates: list[tuple[bytes, int]] = []
        for position, row_type, body in rows:
            if row_type != FRAME_TYPE:
                updates.append((_legacy_form(bytes(body)), position))
                continue
            try:
                items = _FRAME_DECODER.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            frame = pack_frame(
                [tag for tag, _, _ in items],
                [version for _, version, _ in items],
                [_legacy_form(stored) for _, _, stored in items],
            )
            updates.append((frame, position))
        conn.executemany("UPDATE events SET body = ? WHERE position = ?", updates)
        after = rows[-1][0]
