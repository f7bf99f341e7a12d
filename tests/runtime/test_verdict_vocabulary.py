"""judge.verdict's action and level are the judge's vocabulary (runtime.events' Action and
Level). A version 1 body (plain strings, as earlier releases wrote) reads as what the node
did with it; a stored body outside the vocabulary is a corrupt log naming its seq and the
value, never a crash or a silent guess."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from eventstore import CorruptLogError, SqliteEventStore, decode_body, encode_body
from runtime import Runtime, events
from runtime.events import RunStarted, Verdict
from runtime.llm import _verdict

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("action", "level", "read"),
    [
        ("retry", "quality", ("retry", "quality")),
        ("ACCEPT", "Structural", ("accept", "structural")),  # a custom judge's spelling
        ("maybe", "custom", ("escalate", "custom")),  # the node escalated on it
        ("accept", "Level 2 quality", ("accept", "custom")),
    ],
)
def test_a_version_1_verdict_reads_as_what_the_node_did(
    action: str, level: str, read: tuple[str, str]
) -> None:
    v1 = msgspec.json.encode(
        {"type": "judge.verdict", "node_id": "n", "iteration": 2, "action": action, "level": level}
    )
    body = decode_body("judge.verdict", 1, v1)
    assert isinstance(body, Verdict)
    assert (body.action, body.level, body.node_id, body.iteration) == (*read, "n", 2)


def test_the_current_version_round_trips_and_the_llm_vocabulary_is_the_catalogues() -> None:
    body = Verdict(node_id="n", iteration=1, action="retry", level="stall", feedback="loop")
    assert Verdict.schema_version == 2
    assert decode_body("judge.verdict", 2, encode_body(body)) == body
    # One vocabulary: the judge's verdicts use the catalogue's types.
    assert _verdict.Action is events.Action and _verdict.Level is events.Level


async def test_a_stored_verdict_outside_the_vocabulary_is_a_corrupt_log_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    graph = {"id": "g", "entry_node": "a", "nodes": [{"id": "a", "function": "f"}]}
    async with SqliteEventStore(path) as store:
        # Written by hand (a struct's fields are not checked when it is built).
        odd = Verdict(node_id="a", iteration=1, action="accept", level="gut")  # type: ignore[arg-type]
        await store.append(
            "r", [RunStarted(graph=graph, graph_hash="h", input={}, entry="a"), odd], expected_seq=0
        )
        assert (await store.verify("r")).ok  # the chain covers bytes: intact
        with pytest.raises(CorruptLogError) as read:
            await store.read_all("r")
    assert read.value.seq == 2
    assert "judge.verdict" in str(read.value) and "'gut'" in str(read.value)
    async with Runtime(path) as rt:
        with pytest.raises(CorruptLogError) as state:
            await rt.get_state("r")
    assert state.value.seq == 2
