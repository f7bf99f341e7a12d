"""Two SQLite stores on one file: each answers a conflict from the file, never from its
own caches, which the other store's appends leave behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import ConcurrencyError, SqliteEventStore
from runtime.events import MemoryWritten

pytestmark = pytest.mark.anyio


def written(value: int) -> list[MemoryWritten]:
    return [MemoryWritten(key="k", value=value)]


async def test_an_append_at_the_files_last_seq_passes_after_the_other_store_appended(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with SqliteEventStore(path) as one, SqliteEventStore(path) as two:
        for round_ in range(20):
            seq = round_ * 2
            # ``one`` appends (its cache now says seq + 1), then ``two`` appends behind it.
            assert (await one.append("r", written(seq + 1), expected_seq=seq)).last_seq == seq + 1
            assert (await two.append("r", written(seq + 2), expected_seq=seq + 1)).last_seq == (
                seq + 2
            )
        # At the file's last seq, ``one`` appends; at its cache's stale seq, it is refused
        # with the file's position.
        with pytest.raises(ConcurrencyError) as refused:
            await one.append("r", written(0), expected_seq=39)
        assert refused.value.actual_seq == 40
        assert (await one.append("r", written(41), expected_seq=40)).last_seq == 41
        assert (await one.verify("r")).ok
        events = await two.read_all("r")
    assert [e.body.value for e in events] == list(range(1, 42))  # type: ignore[attr-defined]
