"""The event log: the envelope, the body codec and its registry, stores, replay and audit.

Every fact of a run is an :class:`Event` whose ``body`` is a tagged :class:`EventBody`
registered with :func:`register_event_type`; the store knows no particular catalogue (the
runtime's lives in ``runtime``). Stores implement the :class:`EventStore` protocol;
:class:`SqliteEventStore` is the embedded default.
"""

import typing as _typing

from ._claims import Claim, ClaimingStore, LeaseConfirmingStore, NotifyingStore
from ._errors import (
    ConcurrencyError,
    CorruptLogError,
    LeaseLostError,
    NotAStoreError,
    RunOwnedError,
    SchemaVersionError,
    StoreClosedError,
    StoreError,
    StoreFileError,
    StoreMissingError,
    StoreUnreachableError,
    UnknownEventError,
)
from ._events import (
    EVENT_TYPES,
    Event,
    EventBody,
    RunIndex,
    RunIndexHook,
    Upcaster,
    chain_hash,
    decode_body,
    encode_body,
    event_tag,
    register_event_type,
    register_upcaster,
)
from ._heads import HeadsFile, HeadsFileContents, HeadsFileReader, RecordedHead, read_heads_file
from ._open import heads_path_beside, open_store
from ._protocol import (
    AppendResult,
    BackpressuringStore,
    DurabilityConfig,
    EventStore,
    Snapshot,
    SnapshotAfter,
    StoreStatistics,
    VerifyReport,
)
from ._runquery import RunInfo, RunPage, RunQuery
from ._schema import APPLICATION_ID, SCHEMA_VERSION
from ._snapshot_event import SnapshotTaken, binds, snapshot_digest
from ._sqlite import SqliteEventStore

if _typing.TYPE_CHECKING:
    from ._postgres import PostgresEventStore
    from ._postgres_schema import PG_SCHEMA_VERSION

#: Public names imported on first use (see __getattr__).
_LAZY = ("PostgresEventStore", "PG_SCHEMA_VERSION")


def __getattr__(name: str) -> _typing.Any:
    """``PostgresEventStore`` and ``PG_SCHEMA_VERSION``, imported on first use, so that
    psycopg is loaded only by a program that uses a PostgreSQL store."""
    if name == "PostgresEventStore":
        from ._postgres import PostgresEventStore

        return PostgresEventStore
    if name == "PG_SCHEMA_VERSION":
        from ._postgres_schema import PG_SCHEMA_VERSION

        return PG_SCHEMA_VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "APPLICATION_ID",
    "EVENT_TYPES",
    "PG_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "AppendResult",
    "BackpressuringStore",
    "Claim",
    "ClaimingStore",
    "ConcurrencyError",
    "CorruptLogError",
    "DurabilityConfig",
    "Event",
    "EventBody",
    "EventStore",
    "HeadsFile",
    "HeadsFileContents",
    "HeadsFileReader",
    "LeaseConfirmingStore",
    "LeaseLostError",
    "NotAStoreError",
    "NotifyingStore",
    "PostgresEventStore",
    "RecordedHead",
    "RunIndex",
    "RunIndexHook",
    "RunInfo",
    "RunOwnedError",
    "RunPage",
    "RunQuery",
    "SchemaVersionError",
    "Snapshot",
    "SnapshotAfter",
    "SnapshotTaken",
    "SqliteEventStore",
    "StoreClosedError",
    "StoreError",
    "StoreFileError",
    "StoreMissingError",
    "StoreStatistics",
    "StoreUnreachableError",
    "UnknownEventError",
    "Upcaster",
    "VerifyReport",
    "binds",
    "chain_hash",
    "decode_body",
    "encode_body",
    "event_tag",
    "heads_path_beside",
    "open_store",
    "read_heads_file",
    "register_event_type",
    "register_upcaster",
    "snapshot_digest",
]
