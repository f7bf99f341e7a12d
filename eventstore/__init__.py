"""The event log: the envelope, the body codec and its registry, stores, replay and audit.

Every fact of a run is an :class:`Event` whose ``body`` is a tagged :class:`EventBody`
registered with :func:`register_event_type`; the store knows no particular catalogue (the
runtime's lives in ``runtime``). Stores implement the :class:`EventStore` protocol;
:class:`SqliteEventStore` is the embedded default.
"""

from ._claims import Claim, ClaimingStore
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
    UnknownEventError,
)
from ._events import (
    EVENT_TYPES,
    Event,
    EventBody,
    RunIndexHook,
    Upcaster,
    chain_hash,
    decode_body,
    encode_body,
    event_tag,
    register_event_type,
    register_upcaster,
)
from ._open import open_store
from ._postgres import PostgresEventStore
from ._postgres_schema import PG_SCHEMA_VERSION
from ._protocol import (
    AppendResult,
    DurabilityConfig,
    EventStore,
    RunInfo,
    Snapshot,
    StoreStatistics,
    VerifyReport,
)
from ._schema import APPLICATION_ID, SCHEMA_VERSION
from ._sqlite import SqliteEventStore

__all__ = [
    "APPLICATION_ID",
    "EVENT_TYPES",
    "PG_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "AppendResult",
    "Claim",
    "ClaimingStore",
    "ConcurrencyError",
    "CorruptLogError",
    "DurabilityConfig",
    "Event",
    "EventBody",
    "EventStore",
    "LeaseLostError",
    "NotAStoreError",
    "PostgresEventStore",
    "RunIndexHook",
    "RunInfo",
    "RunOwnedError",
    "SchemaVersionError",
    "Snapshot",
    "SqliteEventStore",
    "StoreClosedError",
    "StoreError",
    "StoreFileError",
    "StoreStatistics",
    "UnknownEventError",
    "Upcaster",
    "VerifyReport",
    "chain_hash",
    "decode_body",
    "encode_body",
    "event_tag",
    "open_store",
    "register_event_type",
    "register_upcaster",
]
