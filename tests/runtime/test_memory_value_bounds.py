"""Values past the log's bounds are refused where they enter, naming their key and place,
like any value the log cannot store: nothing is written for a run input, the node fails
for a node output.

- An integer the log cannot write as JSON text and read back (more than 4299 digits; a
  run input of one was written, and then its log could not be read). One at the bound
  goes through the log and reads back unchanged.
- A value of shared lists, small in memory and huge as the log writes it (it was walked
  and encoded for minutes, gigabytes of it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import (
    GraphSpec,
    MemoryValueError,
    NodeSpec,
    RetryPolicy,
    RunNotFoundError,
    Runtime,
)
from runtime.events import NodeFailed

pytestmark = pytest.mark.anyio

LONGEST = 10**4299 - 1  # 4299 digits
TOO_LONG = 10**4299  # 4300 digits: its negative is 4301 characters of JSON


def _graph() -> GraphSpec:
    return GraphSpec(
        id="g",
        nodes=[NodeSpec(id="a", function="echo")],
        edges=[],
        entry_node="a",
        retry=RetryPolicy(max_attempts=1),
    )


def _echo(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"out": inputs["value"]}


async def test_a_run_input_with_a_too_long_integer_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"echo": _echo}) as rt:
        with pytest.raises(MemoryValueError) as caught:
            await rt.start(_graph(), input={"value": [1, {"n": -TOO_LONG}]}, run_id="r")
        assert caught.value.key == "value" and caught.value.where == "value[1]['n']"
        assert "more than 4299 digits" in str(caught.value)
        with pytest.raises(RunNotFoundError):
            await rt.get_state("r")


async def test_a_node_output_with_a_too_long_integer_fails_the_node_naming_it(
    tmp_path: Path,
) -> None:
    def huge(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"out": TOO_LONG}

    async with Runtime(tmp_path / "runs.db", functions={"echo": huge}) as rt:
        handle = await rt.start(_graph())
        result = await handle.result()
        assert result.status == "failed"
        [failed] = [
            e.body for e in await rt.read_events(handle.run_id) if type(e.body) is NodeFailed
        ]
        assert failed.error_type == "MemoryValueError"
        assert failed.error.startswith("memory key 'out': value is an integer of")


async def test_an_integer_of_4299_digits_reads_back_unchanged(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "runs.db", functions={"echo": _echo}) as rt:
        handle = await rt.start(_graph(), input={"value": -LONGEST})
        assert (await handle.result()).status == "completed"
    async with Runtime(tmp_path / "runs.db", functions={"echo": _echo}) as rt:
        state = await rt.get_state(handle.run_id)
        assert state.memory["out"] == -LONGEST and state.memory["value"] == -LONGEST


def _shared(levels: int) -> list[Any]:
    value: list[Any] = ["lol"] * 9
    for _ in range(levels):
        value = [value] * 9
    return value


async def test_a_value_of_shared_lists_past_the_item_bound_is_refused(tmp_path: Path) -> None:
    bomb = _shared(7)  # 9**8 strings as the log would write them
    async with Runtime(tmp_path / "runs.db", functions={"echo": _echo}) as rt:
        with pytest.raises(MemoryValueError) as caught:
            await rt.start(_graph(), input={"value": bomb}, run_id="r")
        assert caught.value.key == "value"
        assert "past 10000000 items" in str(caught.value)
        with pytest.raises(RunNotFoundError):
            await rt.get_state("r")


async def test_a_node_output_of_shared_lists_past_the_item_bound_fails_the_node(
    tmp_path: Path,
) -> None:
    def shares(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"fine": _shared(5), "out": _shared(7)}

    async with Runtime(tmp_path / "runs.db", functions={"echo": shares}) as rt:
        handle = await rt.start(_graph())
        result = await handle.result()
        assert result.status == "failed" and "fine" not in result.memory
        [failed] = [
            e.body for e in await rt.read_events(handle.run_id) if type(e.body) is NodeFailed
        ]
        assert failed.error_type == "MemoryValueError"
        assert failed.error.startswith("memory key 'out': value")
        assert "past 10000000 items" in failed.error
