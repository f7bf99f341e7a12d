"""The event that binds a snapshot to its run's chained log: ``snapshot.taken``.

A snapshot row lies beside the log, outside the hash chain, so its bytes prove nothing by
themselves. The run's owner therefore appends a :class:`SnapshotTaken` event in the same
batch as the row: it holds the SHA-256 of the row's bytes and the fold version that made
them, and the row is stored at that event's seq and chain hash (the
:class:`~eventstore.SnapshotAfter` handed over with the batch counts the events through it).
Whoever loads a snapshot uses it only when :func:`binds` holds for the event at its seq and
the chain from that event to the run's head checks out; any other row (edited, inserted,
or saved by a reader rather than the run's owner) is ignored.

The body is part of the store's stored form, not of any application's catalogue: a fold
gives it no meaning beyond the snapshot it binds.
"""

from __future__ import annotations

from hashlib import sha256

from ._events import Event, EventBody, register_event_type

__all__ = ["SnapshotTaken", "binds", "snapshot_digest"]


@register_event_type
class SnapshotTaken(EventBody, frozen=True, kw_only=True, tag="snapshot.taken"):
    """A snapshot of the run's state through the previous event was saved with this batch.

    ``digest`` is the hex SHA-256 of the snapshot's bytes; ``version`` the fold's version
    that encoded them (the snapshot row's ``version``).
    """

    digest: str
    version: str


def snapshot_digest(data: bytes) -> str:
    """The digest a :class:`SnapshotTaken` records for snapshot bytes ``data``."""
    return sha256(data).hexdigest()


def binds(event: Event, seq: int, chain_hash: str, version: str, data: bytes) -> bool:
    """Whether ``event`` binds a snapshot row (``seq``, ``chain_hash``, ``version``,
    ``data``): it is the row's event (same seq and chain hash) and a ``snapshot.taken``
    naming the row's version and the digest of its bytes. The caller still checks the
    chain from ``event`` to the run's head."""
    body = event.body
    return (
        isinstance(body, SnapshotTaken)
        and event.seq == seq
        and event.hash == chain_hash
        and body.version == version
        and body.digest == snapshot_digest(data)
    )
