"""The SQLite file format of the event store: schema, identification and version checks.

A store is identified by SQLite's ``application_id`` header field and versioned by its
``user_version`` field. Both are read from the raw file header *before* SQLite opens the
file, so a file that is not a store (or comes from a newer release) is never modified.
:func:`open_file` opens it (reading it as it is where its directory cannot be written) and
:func:`describe` says what SQLite's refusals mean for the file.
"""

from __future__ import annotations

import os
import resource
import sqlite3
from urllib.parse import quote

from ._errors import NotAStoreError, SchemaVersionError, StoreFileError
from ._format import add_form_bytes
from ._reindex import fill_run_index

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "check_file",
    "check_schema",
    "create_schema",
    "describe",
    "file_uri",
    "migrate_schema",
    "open_file",
    "sqlite_name",
]

#: "MAGS" in ASCII: marks a SQLite file as a magistrate event store.
APPLICATION_ID = 0x4D414753
#: The version of the store's tables this release reads and writes. Version 2 added frames
#: (rows holding several events, see below); version 3 the snapshots table and the index of
#: runs by status; version 4 the fence (below); version 5 the form byte of stored bodies
#: (see eventstore._format); version 6 the claims table (below); version 7 the runs' graph
#: id and quality and the indexes of filtered listings (below); version 8 the runs' origin
#: (a fork's source); version 9 a claim's draining mark (below). Older files are upgraded
#: when opened.
SCHEMA_VERSION = 9

_SQLITE_MAGIC = b"SQLite format 3\x00"

# Runs get a small integer key so each event row and index entry stores 1-3 bytes instead of
# the run id string; hashes are raw 32-byte blobs; an event's prev_hash is the hash of the
# row before it, so it is not stored twice. This keeps per-event overhead near 60 bytes.
# What an events row holds (frames, stored bodies, hashes) is eventstore._format's; the
# SQL here knows only that a row's ``hash`` column is HASH_WIDTH (32) bytes per event. A
# step of a graph appends 3-5 events at once; as one row (a frame, version 2) it costs
# SQLite a third of the work (one table and one index entry).
_DDL = """
CREATE TABLE runs (
    run        INTEGER PRIMARY KEY,
    run_id     TEXT    NOT NULL UNIQUE,
    status     TEXT    NOT NULL,
    created    REAL    NOT NULL,
    updated    REAL    NOT NULL,
    last_seq   INTEGER NOT NULL,
    graph_hash TEXT
);
CREATE TABLE events (
    position INTEGER PRIMARY KEY,
    run      INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    ts       REAL    NOT NULL,
    type     TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    hash     BLOB    NOT NULL,
    body     BLOB    NOT NULL
);
CREATE UNIQUE INDEX events_run_seq ON events (run, seq);
"""
# Version 3: runs listed by status without a scan, and snapshots (a cache of a run's folded
# state, see eventstore.Snapshot; only the newest of a run is kept).
_V3_DDL = """
CREATE INDEX runs_status ON runs (status, run);
CREATE TABLE snapshots (
    run     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    hash    BLOB    NOT NULL,
    version TEXT    NOT NULL,
    data    BLOB    NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;
"""
# Version 4: the file is the fence between writers. The runs row records the run's last
# seq and last hash; every events row must start right after that seq (and after every
# position in the file), and advances the record. So a writer whose idea of a run is stale
# (another process appended since) cannot write: its statement fails and the whole
# transaction with it, whatever the writer's caches said. The runs row also tells a read
# or verify where the log must end (a deleted tail shows).
_V4_DDL = """
ALTER TABLE runs ADD COLUMN last_hash BLOB NOT NULL DEFAULT x'';
UPDATE runs SET
    last_seq = max(last_seq, coalesce((SELECT e.seq + length(e.hash) / 32 - 1 FROM events e
        WHERE e.run = runs.run ORDER BY e.seq DESC LIMIT 1), 0)),
    last_hash = coalesce((SELECT substr(e.hash, -32) FROM events e
        WHERE e.run = runs.run ORDER BY e.seq DESC LIMIT 1), x'');
CREATE TRIGGER events_fence BEFORE INSERT ON events
BEGIN
    SELECT RAISE(ABORT, 'magistrate event store: the run moved on (seq conflict)')
    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE run = NEW.run AND last_seq = NEW.seq - 1)
        OR NEW.position < coalesce((SELECT position + length(hash) / 32 FROM events
            ORDER BY position DESC LIMIT 1), 1);
    UPDATE runs SET last_seq = NEW.seq + length(NEW.hash) / 32 - 1,
        last_hash = substr(NEW.hash, -32), updated = NEW.ts WHERE run = NEW.run;
END;
"""
# Version 6: run ownership (see eventstore.ClaimingStore). A run's claim: its owner and
# lease expiry (None once released) and its epoch, raised by every claim. Written by the
# store's writer in its append transactions, which also check the epoch of every append of
# a run the store holds a claim on.
_V6_DDL = """
CREATE TABLE claims (
    run_id  TEXT    PRIMARY KEY,
    owner   TEXT,
    expires REAL,
    epoch   INTEGER NOT NULL
) WITHOUT ROWID;
"""


# Version 7: filtered, keyset-paged listings (eventstore._runquery). The runs row gains the
# graph id and quality the run_index hooks give, and each filter has an index ending in
# (created, run), the listing's order, so a page of any one filter, time range and cursor
# is one range scan with no sort (``run`` is the rowid: every index ends with it).
_V7_DDL = """
ALTER TABLE runs ADD COLUMN graph_id TEXT;
ALTER TABLE runs ADD COLUMN quality TEXT;
DROP INDEX runs_status;
CREATE INDEX runs_status ON runs (status, created);
CREATE INDEX runs_created ON runs (created);
CREATE INDEX runs_quality ON runs (quality, created);
CREATE INDEX runs_graph ON runs (graph_id, created);
CREATE INDEX runs_graph_hash ON runs (graph_hash, created);
"""


# Version 8: the run a fork's log was copied from, for the listing (run_index's origin).
_V8_DDL = """
ALTER TABLE runs ADD COLUMN origin TEXT;
"""
# Version 9: a claim kept while an abandoned attempt of its run still runs in the owner's
# process (the run is "draining" there): the nodes whose attempts run on and since when
# (on this machine's clock). Cleared by a release and replaced by a new claim.
_V9_DDL = """
ALTER TABLE claims ADD COLUMN draining TEXT;
ALTER TABLE claims ADD COLUMN draining_since REAL;
"""


def check_file(path: str) -> bool:
    """Inspect ``path`` without modifying it; return True if a new store must be created.

    Raises NotAStoreError for a directory, a non-SQLite file or another application's SQLite
    database, SchemaVersionError for a store of a newer schema version, and StoreFileError
    for a path in a directory that does not exist (a symbolic link's: its target's).
    """
    if not os.path.exists(path):
        link = os.path.islink(path)  # dangling: SQLite would create its target
        directory = os.path.dirname(os.path.realpath(path) if link else os.path.abspath(path))
        if not os.path.isdir(directory):
            target = f" (it is a symbolic link to {os.readlink(path)})" if link else ""
            raise StoreFileError(path, f"its directory {directory} does not exist{target}")
        return True
    if os.path.isdir(path):
        raise NotAStoreError(path, "it is a directory")
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise NotAStoreError(path, f"cannot read it: {exc}") from exc
    if not header:
        return True  # an empty file is an empty SQLite database: make it a store
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise NotAStoreError(path, "it is not an SQLite database")
    app_id = int.from_bytes(header[68:72], "big")
    version = int.from_bytes(header[60:64], "big")
    if app_id != APPLICATION_ID:
        raise NotAStoreError(path, f"an SQLite database with application_id {app_id:#x}")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(path, version, SCHEMA_VERSION)
    return False


def create_schema(conn: sqlite3.Connection, page_size: int) -> None:
    """Create the tables in an empty database (``conn`` in autocommit mode). Another
    process may have created them since the file was found empty (several commands
    starting on a new store at once): under the write lock, a database that holds a schema
    now is left as it is (and checked by the caller)."""
    conn.execute(f"PRAGMA page_size = {int(page_size)}")
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            conn.execute("ROLLBACK")
            return
        for script in (_DDL, _V3_DDL, _V4_DDL, _V6_DDL, _V7_DDL, _V8_DDL, _V9_DDL):
            _run_script(conn, script)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def migrate_schema(conn: sqlite3.Connection) -> None:
    """Upgrade an older store in place (``conn`` in autocommit mode, before any append).

    In one transaction. Version 1 -> 2 changes no table: version 1 rows are rows of one
    event; the version is raised so that a release that cannot read frames refuses the file
    instead of misreading it. Version 2 -> 3 adds the snapshots table and the runs index;
    3 -> 4 the fence (the runs row's last seq and hash, taken from the events); 4 -> 5
    rewrites each stored body with its form byte (reading every row once); 5 -> 6 adds
    the claims table, empty: the ``PATH-claims`` file where version 5 kept claims is not
    read (upgrade with the older release's processes stopped; the file can be deleted);
    6 -> 7 adds the runs' graph id and quality, filled from the events by the
    ``run_index`` hooks registered at that time (reading the rows of hooked types once),
    and the listing indexes; 7 -> 8 the runs' origin (a fork's source), filled the same
    way (6 -> 8 fills all three in one reading); 8 -> 9 a claim's draining mark.
    """
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read again under the write lock: another process opening the store at once may
        # have upgraded it meanwhile (then there is nothing left to do).
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION:
            conn.execute("ROLLBACK")
            return
        if version < 3:
            _run_script(conn, _V3_DDL)
        if version < 4:
            _run_script(conn, _V4_DDL)
        if version < 5:
            add_form_bytes(conn)
        if version < 6:
            _run_script(conn, _V6_DDL)
        if version < 7:
            _run_script(conn, _V7_DDL)
        if version < 8:
            _run_script(conn, _V8_DDL)
            fill_run_index(conn)
        if version < 9:
            _run_script(conn, _V9_DDL)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run each statement of ``script`` (inside the caller's transaction, unlike
    executescript, which commits first)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"an incomplete statement in a schema script: {statement!r}")


def check_schema(conn: sqlite3.Connection, path: str) -> None:
    """Check an opened store through SQL (the header may lag behind an unmerged WAL)."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        raise NotAStoreError(path, f"an SQLite database with application_id {app_id:#x}")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(path, version, SCHEMA_VERSION)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    missing = {"runs", "events"} - tables
    if missing:
        raise NotAStoreError(path, f"tables missing: {', '.join(sorted(missing))}")


def open_file(path: str, create: bool, page_size: int) -> tuple[sqlite3.Connection, str | None]:
    """Open the write connection to the store at ``path`` (blocking): create the schema
    (``create``), check it and upgrade an older one; return it and None.
    For a store in a directory this process may not write (SQLite cannot make the ``-shm``
    file of its WAL there), a connection reading the file as it is, and why it is so.
    Raises StoreFileError (saying what SQLite's refusal means), NotAStoreError or
    SchemaVersionError (see :func:`check_schema`)."""
    what = "create" if create else "open or read"
    try:
        conn = sqlite3.connect(sqlite_name(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreFileError(path, describe(path, exc), what) from exc
    read_only: str | None = None
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        if create:
            create_schema(conn, page_size)
        try:
            check_schema(conn, path)
        except sqlite3.OperationalError as exc:
            read_only = _read_as_is(path, exc)
            if read_only is None:
                raise
        if read_only is None:
            try:
                migrate_schema(conn)
            except sqlite3.OperationalError as exc:
                if not str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_READONLY"):
                    raise
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                raise _not_upgraded(path, f"the file is read-only ({exc})", version) from exc
    except sqlite3.Error as exc:
        conn.close()
        raise StoreFileError(path, describe(path, exc), what) from exc
    except BaseException:
        conn.close()
        raise
    if read_only is None:
        return conn, None
    conn.close()
    return _open_as_is(path, read_only), read_only


def _open_as_is(path: str, read_only: str) -> sqlite3.Connection:
    """A connection reading the store at ``path`` as it is (:func:`file_uri`), checked."""
    conn = None
    try:
        conn = sqlite3.connect(
            file_uri(path), uri=True, isolation_level=None, check_same_thread=False
        )
        check_schema(conn, path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            raise _not_upgraded(path, read_only, version)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.Error):
            raise StoreFileError(path, describe(path, exc)) from exc
        raise
    return conn


def _not_upgraded(path: str, why: str, version: int) -> StoreFileError:
    return StoreFileError(
        path,
        f"{why}, and the store (schema version {version}) must be upgraded to "
        f"{SCHEMA_VERSION}, which writes to it: open it once where it can be written",
    )


def sqlite_name(path: str) -> str:
    """The name SQLite opens the store at ``path`` by: ``path``, unless SQLite would read it
    as a URI (``file:x.db``, if built to read URIs anywhere): another file than ``path``."""
    return "./" + path if path.startswith("file:") else path


def file_uri(path: str) -> str:
    """The URI that opens the store at ``path`` as it is, read-only, without the WAL's
    ``-shm`` file: for a store whose directory cannot be written (see :func:`open_file`)."""
    return f"file:{quote(os.path.abspath(path))}?mode=ro&immutable=1"


def _read_as_is(path: str, exc: sqlite3.OperationalError) -> str | None:
    """Why the store at ``path`` is read as it is, when ``exc`` is SQLite failing to make
    the ``-shm`` file of a store in a directory this process may not write, else None.
    StoreFileError if a WAL file waits there (reading the file as it is would miss it)."""
    directory = os.path.dirname(os.path.realpath(path))
    name = str(getattr(exc, "sqlite_errorname", ""))
    if not name.startswith("SQLITE_CANTOPEN") or os.access(directory, os.W_OK):
        return None
    why = f"its directory {directory} is not writable (a store keeps its WAL files there)"
    wal = os.path.realpath(path) + "-wal"  # where SQLite keeps it (beside a link's target)
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise StoreFileError(
            path,
            f"{why}, and {wal} may hold commits not yet merged into the file, which SQLite "
            "reads only with a -shm file it cannot make there: make the directory "
            "writable and open the store once (that merges them)",
        ) from exc
    return why


def describe(path: str, exc: sqlite3.Error) -> str:
    """SQLite's refusal of the store's file, with what it means for the file where that
    can be told: a directory that is missing or cannot be written, a write lock held
    elsewhere, a file cut short or damaged, a full disk or a file size limit."""
    said = str(exc)
    name = str(getattr(exc, "sqlite_errorname", ""))
    directory = os.path.dirname(os.path.realpath(path))
    if name.startswith("SQLITE_CANTOPEN"):
        if not os.path.isdir(directory):
            return f"{said}: its directory {directory} does not exist"
        if not os.access(directory, os.W_OK):
            return f"{said}: its directory {directory} is not writable"
        return said
    if name.startswith("SQLITE_BUSY"):
        return (
            f"{said}: another process has held its write lock for over 10 s (upgrading a "
            "large store, or stopped while writing); try again once it is done"
        )
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return f"{said}: {_damage(path)}"
    if name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR_WRITE"):
        return f"{said}: the file could not grow: {_no_room(directory)}"
    return said


def _no_room(directory: str) -> str:
    """Why a file in ``directory`` may not have grown: this process's file size limit, if
    it has one, and the disk's free space (unless there is plenty beside a limit)."""
    reasons = []
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY:
        reasons.append(f"it reached this process's file size limit ({limit} bytes)")
    try:
        stat = os.statvfs(directory)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        free = 0
    if not reasons or free < 64_000_000:
        room = f"{free} bytes" if free < 10_000_000 else f"{free // 1_000_000} MB"
        reasons.append(f"the disk may be full ({room} free there)")
    return ", or ".join(reasons)


def _damage(path: str) -> str:
    """What is wrong with a store file SQLite finds malformed, as far as its header tells."""
    damaged = "the file is damaged; restore it from a backup"
    try:
        with open(path, "rb") as f:
            header = f.read(100)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return damaged
    if len(header) == 100 and header.startswith(_SQLITE_MAGIC):
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(header[28:32], "big")
        valid = header[24:28] == header[92:96]  # the header's page count is kept up to date
        if valid and size < page_size * pages:
            return (
                f"the file is cut short ({size} bytes, its header says {page_size * pages}); "
                "restore it from a backup"
            )
    return damaged
