"""Reading a PostgreSQL store's events: a run's log in chunks, its verification, and the
rows a follower of every run tails, decoded into :class:`Event`.

The functions take the store's ``fetch`` (one query on a pooled connection, errors mapped
to the store's), so that they hold no connection of their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec

from ._errors import CorruptLogError, UnknownEventError
from ._events import Event, chain_digest, decode_body
from ._protocol import VerifyReport

__all__ = ["Fetch", "read_events", "tail_chunk", "verify_run"]

Fetch = Callable[[str, str, tuple[Any, ...]], Awaitable[list[Any]]]

CHUNK = 1000
_EVENT_COLUMNS = "position, seq, ts, type, version, hash, body"


def decode_event(run_id: str, row: Any, prev_hash: str) -> Event:
    """The event of a row that starts with ``_EVENT_COLUMNS``."""
    position, seq, ts, tag, version, digest, body = row[:7]
    try:
        decoded = decode_body(tag, version, bytes(body))
    except UnknownEventError as exc:
        raise UnknownEventError(tag, version, run_id) from exc
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptLogError(run_id, seq, f"undecodable {tag!r} body: {exc}") from exc
    return Event(
        run_id=run_id,
        seq=seq,
        position=position,
        ts=ts,
        version=version,
        prev_hash=prev_hash,
        hash=bytes(digest).hex(),
        body=decoded,
    )


async def read_events(
    fetch: Fetch, run_id: str, from_seq: int, to_seq: int | None, verify: bool
) -> AsyncIterator[Event]:
    """See PostgresEventStore.read."""
    if "\x00" in run_id:  # PostgreSQL text holds no NUL: no run has this id
        return
    rows = await fetch(
        "read", "SELECT run, last_seq, last_hash FROM runs WHERE run_id = %s", (run_id,)
    )
    if not rows:
        return
    key, head, head_hash = rows[0]
    expected = max(1, from_seq)
    high = to_seq if to_seq is not None else 2**62
    prev = ""
    if expected > 1:
        rows = await fetch(
            "read", "SELECT hash FROM events WHERE run = %s AND seq = %s", (key, expected - 1)
        )
        prev = bytes(rows[0][0]).hex() if rows else ""
    while expected <= high:
        rows = await fetch(
            "read",
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run = %s AND seq >= %s "
            "AND seq <= %s ORDER BY seq LIMIT %s",
            (key, expected, high, CHUNK),
        )
        for row in rows:
            if row[1] != expected:
                raise CorruptLogError(run_id, expected, "event missing (gap in seq)")
            if verify:
                _, seq, _, tag, version, digest, body = row[:7]
                computed = chain_digest(bytes.fromhex(prev), run_id, seq, tag, version, body)
                if computed != bytes(digest) or (seq == head and bytes(digest) != bytes(head_hash)):
                    raise CorruptLogError(
                        run_id, seq, "hash mismatch: the event was changed after append"
                    )
            event = decode_event(run_id, row, prev)
            prev = event.hash
            expected += 1
            yield event
        if len(rows) < CHUNK:
            break
    if verify and expected <= min(head, high):
        raise CorruptLogError(
            run_id,
            expected,
            f"events missing: the log ends at seq {expected - 1} but the run's head is at {head}",
        )


async def verify_run(fetch: Fetch, run_id: str) -> VerifyReport:
    """See PostgresEventStore.verify."""
    if "\x00" in run_id:  # PostgreSQL text holds no NUL: no run has this id
        return VerifyReport(run_id, False, 0, None, "no such run")
    rows = await fetch("verify", "SELECT run, last_seq FROM runs WHERE run_id = %s", (run_id,))
    if not rows:
        return VerifyReport(run_id, False, 0, None, "no such run")
    key, head = rows[0]
    prev = b""
    expected = 1
    while True:
        rows = await fetch(
            "verify",
            "SELECT seq, type, version, hash, body FROM events WHERE run = %s AND seq >= %s "
            "ORDER BY seq LIMIT %s",
            (key, expected, CHUNK),
        )
        for seq, tag, version, stored, body in rows:
            checked = expected - 1
            if seq != expected:
                return VerifyReport(run_id, False, checked, expected, "event missing")
            data = bytes(body)
            digest = chain_digest(prev, run_id, seq, tag, version, data)
            if digest != bytes(stored):
                return VerifyReport(
                    run_id, False, checked, seq, "hash mismatch: event edited after append"
                )
            # The chain covers the stored bytes: no body is decoded, so verifying needs no
            # event catalogue (a process that knows none of the types checks the same).
            prev = digest
            expected += 1
        if len(rows) < CHUNK:
            break
    checked = expected - 1
    if head == checked == 0:  # a row a claim made before the run's first append
        return VerifyReport(run_id, False, 0, None, "no such run")
    if head != checked:
        return VerifyReport(
            run_id,
            False,
            checked,
            checked + 1,
            f"the run's head is at seq {head} but the log ends at {checked}",
        )
    return VerifyReport(run_id, True, checked, None, None)


async def tail_chunk(fetch: Fetch, position: int) -> list[Event]:
    """Up to CHUNK events of every run with a position after ``position``, in order."""
    rows = await fetch(
        "tail",
        "SELECT e.position, e.seq, e.ts, e.type, e.version, e.hash, e.body, r.run_id, "
        "p.hash FROM events e JOIN runs r ON r.run = e.run "
        "LEFT JOIN events p ON p.run = e.run AND p.seq = e.seq - 1 "
        "WHERE e.position > %s ORDER BY e.position LIMIT %s",
        (position, CHUNK),
    )
    return [
        decode_event(row[7], row, "" if row[8] is None else bytes(row[8]).hex()) for row in rows
    ]
