"""Events back from a SQLite store's rows, with the hash chain checked when asked."""

from __future__ import annotations

from typing import Any

import msgspec

from ._errors import CorruptLogError, UnknownEventError
from ._events import Event, chain_digest, decode_body
from ._format import FormatError, decode_row, load_body

__all__ = ["check_row", "row_events"]


def check_row(run_id: str, row: Any, prev_hash: str) -> tuple[str, int]:
    """Check the hash chain of one stored row's events from ``prev_hash``, over their
    stored bytes only: no body is decoded, so no event type needs to be known here.

    Returns the last event's hash and the seq after it. Raises CorruptLogError naming the
    seq of a row that cannot be read or a hash that does not match.
    """
    seq, row_type, row_version, hashes, stored_row = row[1], row[3], row[4], row[5], row[6]
    try:
        items = decode_row(row_type, row_version, bytes(hashes), bytes(stored_row))
    except (FormatError, TypeError) as exc:
        raise CorruptLogError(run_id, seq, f"corrupt row: {exc}") from exc
    prev = bytes.fromhex(prev_hash)
    for offset, (tag, version, digest, stored) in enumerate(items):
        try:
            data = load_body(stored, tag)
        except FormatError as exc:
            raise CorruptLogError(run_id, seq + offset, f"unreadable {tag!r} body: {exc}") from exc
        if chain_digest(prev, run_id, seq + offset, tag, version, data) != digest:
            raise CorruptLogError(
                run_id, seq + offset, "hash mismatch: the event was changed after append"
            )
        prev = digest
    return prev.hex(), seq + len(items)


def row_events(run_id: str, row: Any, prev_hash: str, *, check: bool = False) -> list[Event]:
    """The events of one stored row (a frame holds several), chained from ``prev_hash``.

    ``row`` is (position, seq, ts, type, version, hash, body). With ``check``, each event's
    hash is recomputed from its stored bytes and ``prev_hash`` and must be the stored one.
    Raises CorruptLogError (naming the seq) for a row or body that cannot be read or a hash
    that does not match, UnknownEventError for an unregistered type.
    """
    position, seq, ts, row_type, row_version, hashes, stored_row = row[:7]
    try:
        items = decode_row(row_type, row_version, bytes(hashes), bytes(stored_row))
    except (FormatError, TypeError) as exc:
        raise CorruptLogError(run_id, seq, f"corrupt row: {exc}") from exc
    events: list[Event] = []
    prev_digest = bytes.fromhex(prev_hash) if check else b""
    for offset, (tag, version, digest, stored) in enumerate(items):
        try:
            data = load_body(stored, tag)
            if check and chain_digest(prev_digest, run_id, seq + offset, tag, version, data) != (
                digest
            ):
                raise CorruptLogError(
                    run_id, seq + offset, "hash mismatch: the event was changed after append"
                )
            body = decode_body(tag, version, data)
        except UnknownEventError as exc:
            raise UnknownEventError(tag, version, run_id) from exc
        except (msgspec.DecodeError, msgspec.ValidationError, FormatError, TypeError) as exc:
            raise CorruptLogError(run_id, seq + offset, f"undecodable {tag!r} body: {exc}") from exc
        event_hash = digest.hex()
        events.append(
            Event(
                run_id=run_id,
                seq=seq + offset,
                position=position + offset,
                ts=ts,
                version=version,
                prev_hash=prev_hash,
                hash=event_hash,
                body=body,
            )
        )
        prev_hash = event_hash
        prev_digest = digest
    return events
