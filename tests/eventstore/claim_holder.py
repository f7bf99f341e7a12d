"""A process holding a claim, for test_sqlite_claims.py, which takes the run over.

Usage: python -m tests.eventstore.claim_holder DB RUN_ID LEASE
Claims RUN_ID as ``holder`` for LEASE seconds and appends one event, prints ``claimed``,
waits for a line on stdin (it never renews meanwhile), then appends at the right seq and
prints ``appended`` or the error's class name, expected and actual epoch, and owner.
"""

from __future__ import annotations

import sys

import anyio

from eventstore import LeaseLostError, SqliteEventStore, StoreError
from runtime.events import MemoryWritten


async def main(db: str, run_id: str, lease: float) -> None:
    async with SqliteEventStore(db) as store:
        await store.claim(run_id, "holder", lease=lease)
        await store.append(run_id, [MemoryWritten(key="k", value="holder")], expected_seq=0)
        print("claimed", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        try:
            await store.append(run_id, [MemoryWritten(key="k", value="stale")], expected_seq=1)
        except LeaseLostError as exc:
            print(type(exc).__name__, exc.expected_epoch, exc.actual_epoch, exc.owner, flush=True)
        except StoreError as exc:
            print(type(exc).__name__, flush=True)
        else:
            print("appended", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]))
