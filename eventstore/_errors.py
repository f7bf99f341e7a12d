"""Exceptions of the event log.

The tree (rooted at :class:`actors.MagistrateError`)::

    MagistrateError
    └── StoreError                 any failure of an event store
        ├── ConcurrencyError       append's expected_seq is not the run's last seq (a conflict)
        ├── CorruptLogError        a stored event cannot be read back as written
        ├── LeaseLostError         this process's claim on a run was taken over (the epoch fence)
        ├── NotAStoreError         the file is not a magistrate event store
        ├── RunOwnedError          a run is claimed by another owner whose lease is live
        ├── SchemaVersionError     the store was written by a newer release
        ├── StoreClosedError       the store is not open (or closed while the call waited)
        ├── StoreFileError         the store's file cannot be opened or read (with its path)
        ├── StoreUnreachableError  the store's server cannot be connected to (with where it is)
        └── UnknownEventError      a stored event has a type tag no release registered
"""

from __future__ import annotations

from datetime import UTC, datetime

from actors._errors import MagistrateError

__all__ = [
    "ConcurrencyError",
    "CorruptLogError",
    "LeaseLostError",
    "NotAStoreError",
    "RunOwnedError",
    "SchemaVersionError",
    "StoreClosedError",
    "StoreError",
    "StoreFileError",
    "StoreUnreachableError",
    "UnknownEventError",
]


class StoreError(MagistrateError):
    """An error of an event store."""


class ConcurrencyError(StoreError):
    """The run's last seq is not what the appender expected: nothing of the batch was written.

    ``actual_seq`` is the run's last seq when the batch was checked (0 for an empty run).
    """

    def __init__(self, run_id: str, expected_seq: int, actual_seq: int) -> None:
        self.run_id = run_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"run {run_id!r}: expected last seq {expected_seq}, but the log is at {actual_seq}"
        )


class CorruptLogError(StoreError):
    """A stored event of ``run_id`` at ``seq`` cannot be read back as it was written."""

    def __init__(self, run_id: str, seq: int, reason: str) -> None:
        self.run_id = run_id
        self.seq = seq
        self.reason = reason
        super().__init__(f"run {run_id!r}, seq {seq}: corrupt log: {reason}")


class LeaseLostError(StoreError):
    """This process claimed ``run_id`` at ``expected_epoch``, but the store holds
    ``actual_epoch`` (claimed by ``owner``, or released): the lease expired and the run was
    taken over. Nothing of the batch was written; the run's executor here must stop.

    The epochs are None where they are not known: a runtime that finds its lease was not
    renewed stops the run without reading who holds it now.
    """

    def __init__(
        self,
        run_id: str,
        expected_epoch: int | None,
        actual_epoch: int | None,
        owner: str | None,
    ) -> None:
        self.run_id = run_id
        self.expected_epoch = expected_epoch
        self.actual_epoch = actual_epoch
        self.owner = owner
        held = "" if expected_epoch is None else f" (epoch {expected_epoch})"
        if actual_epoch is None:
            now = "its lease could not be renewed, so the run stopped here"
        else:
            now = f"the store is at epoch {actual_epoch}, owner {owner!r}; nothing was written"
        super().__init__(f"run {run_id!r}: this process's claim{held} is lost; {now}")


class RunOwnedError(StoreError):
    """``run_id`` is claimed by ``owner`` whose lease runs until ``lease_expires`` (seconds
    since the epoch, the store's clock): it is live elsewhere and cannot be claimed."""

    def __init__(self, run_id: str, owner: str, lease_expires: float) -> None:
        self.run_id = run_id
        self.owner = owner
        self.lease_expires = lease_expires
        until = datetime.fromtimestamp(lease_expires, UTC).isoformat(timespec="milliseconds")
        super().__init__(
            f"run {run_id!r} is live elsewhere: owned by {owner!r} with a lease until {until}; "
            "it cannot be claimed before that lease expires"
        )


class NotAStoreError(StoreError):
    """The file at ``path`` is not a magistrate event store; it was left unchanged."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: not a magistrate event store: {reason}")


class SchemaVersionError(StoreError):
    """The store's schema version is newer than this release supports; it was left unchanged."""

    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(
            f"{path}: store schema version {found} is newer than the supported version "
            f"{supported}; upgrade magistrate to open it"
        )


class StoreClosedError(StoreError):
    """The store is not open, or was closed before the call completed."""

    def __init__(self, operation: str = "", reason: str = "the event store is closed") -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"{operation}: {reason}" if operation else reason)


class StoreFileError(StoreError):
    """The store's file at ``path`` cannot be created, opened, read or written: its
    directory does not exist, it is truncated, damaged or read-only, or the system refused
    (``reason`` says which; ``what`` what could not be done)."""

    def __init__(self, path: str, reason: str, what: str = "open or read") -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: cannot {what} the event store: {reason}")


class StoreMissingError(StoreError):
    """There is no store at ``where`` (no SQLite file, or a PostgreSQL schema without its
    tables) and it was opened with ``create=False``; nothing was created."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: no event store there: {reason} (nothing was created)")


class StoreUnreachableError(StoreError):
    """The store's server at ``where`` (its address, never a password) cannot be connected
    to: nothing listens there, it refused, or the login failed (``reason``, one line)."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: cannot connect: {reason}")


class UnknownEventError(StoreError):
    """A stored event's type tag (at ``version``) is not registered in this release."""

    def __init__(self, tag: str, version: int, run_id: str | None = None) -> None:
        self.tag = tag
        self.version = version
        self.run_id = run_id
        where = f" in run {run_id!r}" if run_id is not None else ""
        super().__init__(f"unknown event type {tag!r} (version {version}){where}")
