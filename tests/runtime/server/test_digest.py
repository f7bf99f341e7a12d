"""The run detail's verdict digest: it takes in only new events, and starts over when the
log it reads does not continue the one it was built from."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import EventBody, SqliteEventStore
from runtime import EdgeTaken, RunStarted, StallDetected, Verdict
from runtime.server._digest import DigestCache

pytestmark = pytest.mark.anyio


def verdicts(node: str, count: int, action: str = "accept") -> list[EventBody]:
    return [
        Verdict(node_id=node, iteration=i, action=action, level="structural") for i in range(count)
    ]


async def test_a_digest_reads_only_what_was_appended_since(tmp_path: Path) -> None:
    async with SqliteEventStore(tmp_path / "s.db") as store:
        started = RunStarted(graph={"id": "g"}, graph_hash="h", entry="n")
        await store.append("r", [started, *verdicts("n", 3)], expected_seq=0)
        cache = DigestCache(store)
        digest = await cache.digest("r", 4)
        assert digest.verdict_totals == {"n": 3} and digest.last_seq == 4
        more: list[EventBody] = [
            StallDetected(node_id="n", iteration=3, signature="s"),
            EdgeTaken(source="n", target="m", edge_index=0, condition="always"),
            *verdicts("m", 600, "retry"),
        ]
        await store.append("r", more, expected_seq=4)
        again = await cache.digest("r", 606)
        assert again is digest and digest.last_seq == 606
        assert digest.verdict_totals == {"n": 3, "m": 600}
        kept = digest.verdicts["m"]
        assert len(kept) == 500 and kept[0].seq == 107 and kept[-1].seq == 606
        assert [s.seq for s in digest.stalls["n"]] == [5]
        assert list(digest.taken) == ["n>m"]
        assert digest.counts == {
            "run.started": 1,
            "judge.verdict": 603,
            "node.stalled": 1,
            "edge.taken": 1,
        }
        assert await cache.digest("r", 10) is digest  # nothing to read


async def test_a_digest_starts_over_on_a_log_that_does_not_continue_it(tmp_path: Path) -> None:
    async with (
        SqliteEventStore(tmp_path / "a.db") as first,
        SqliteEventStore(tmp_path / "b.db") as second,
    ):
        started = RunStarted(graph={"id": "g"}, graph_hash="h", entry="n")
        await first.append("r", [started, *verdicts("n", 2)], expected_seq=0)
        other = RunStarted(graph={"id": "other"}, graph_hash="h2", entry="n")
        await second.append("r", [other, *verdicts("x", 2), *verdicts("y", 3)], expected_seq=0)
        cache = DigestCache(first)
        assert (await cache.digest("r", 3)).verdict_totals == {"n": 2}
        cache.store = second  # the same run id, another log (a store restored from elsewhere)
        rebuilt = await cache.digest("r", 6)
        assert rebuilt.verdict_totals == {"x": 2, "y": 3} and rebuilt.last_seq == 6
