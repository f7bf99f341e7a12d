from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.llm._stall import StallDetector, signature
from runtime.providers._base import ToolCall

pytestmark = pytest.mark.anyio


def call(name: str, id: str = "c", **arguments: object) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=dict(arguments))


async def test_signature_ignores_call_order_ids_and_key_order() -> None:
    a = [call("search", "1", q="x", page=1), call("fetch", "2", url="u")]
    b = [
        ToolCall(id="9", name="fetch", arguments={"url": "u"}),
        ToolCall(id="8", name="search", arguments={"page": 1, "q": "x"}),
    ]
    assert signature(a) == signature(b)
    assert signature(a) == '[["fetch",{"url":"u"}],["search",{"page":1,"q":"x"}]]'
    assert json.loads(signature(a)) == [["fetch", {"url": "u"}], ["search", {"page": 1, "q": "x"}]]


async def test_signature_distinguishes_arguments_and_repeats() -> None:
    assert signature([call("s", q="x")]) != signature([call("s", q="y")])
    assert signature([call("s", q="x")]) != signature([call("s", q="x"), call("s", q="x")])
    assert signature([call("s", q={"a": 1, "b": 2})]) == signature([call("s", q={"b": 2, "a": 1})])
    assert signature([]) == ""


async def test_detects_exactly_at_third_identical_turn() -> None:
    detector = StallDetector()
    turn = [call("search", q="same")]
    assert detector.observe(turn) is False
    assert detector.count == 1
    assert detector.observe([call("search", "other-id", q="same")]) is False
    assert detector.observe(turn) is True
    assert detector.last_signature == signature(turn)


async def test_detection_restarts_count_so_sixth_identical_turn_fires_again() -> None:
    detector = StallDetector()
    turn = [call("search", q="same")]
    results = [detector.observe(turn) for _ in range(7)]
    assert results == [False, False, True, False, False, True, False]


async def test_turn_without_tool_calls_resets() -> None:
    detector = StallDetector()
    turn = [call("search", q="same")]
    detector.observe(turn)
    detector.observe(turn)
    assert detector.observe([]) is False
    assert detector.count == 0
    assert detector.observe(turn) is False
    assert detector.observe(turn) is False
    assert detector.observe(turn) is True


async def test_different_arguments_break_the_run() -> None:
    detector = StallDetector()
    detector.observe([call("search", q="a")])
    detector.observe([call("search", q="a")])
    assert detector.observe([call("search", q="b")]) is False
    assert detector.count == 1


async def test_custom_threshold_and_validation() -> None:
    detector = StallDetector(threshold=2)
    assert detector.observe([call("x")]) is False
    assert detector.observe([call("x")]) is True
    with pytest.raises(ValueError):
        StallDetector(threshold=0)


async def test_from_history_resumes_where_the_log_left_off() -> None:
    turn = [call("search", q="same")]
    detector = StallDetector.from_history([[call("other")], turn, turn])
    assert detector.count == 2
    assert detector.observe(turn) is True


async def test_non_json_arguments_still_get_a_deterministic_signature() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    a = [ToolCall(id="1", name="t", arguments={"b": Opaque(), "a": 1})]
    b = [ToolCall(id="2", name="t", arguments={"a": 1, "b": Opaque()})]
    assert signature(a) == signature(b)
    detector = StallDetector()
    assert [detector.observe(a) for _ in range(3)] == [False, False, True]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3), max_size=40))
def test_changing_arguments_never_trigger(values: list[int]) -> None:
    # Each turn's argument differs from the previous turn's: never two identical in a row.
    detector = StallDetector()
    previous = None
    for index, value in enumerate(values):
        arg = value if value != previous else value + 10
        previous = arg
        assert detector.observe([call("search", str(index), q=arg)]) is False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ""]), max_size=40))
def test_detects_iff_threshold_identical_consecutive_turns(seq: list[str]) -> None:
    # Reference model: count runs of identical non-empty signatures, fire at each 3rd.
    detector = StallDetector()
    run, last = 0, None
    for item in seq:
        turn = [call("t", q=item)] if item else []
        if not item:
            run, last = 0, None
            expected = False
        else:
            run = run + 1 if item == last else 1
            last = item
            expected = run % 3 == 0
        assert detector.observe(turn) is expected
    restored = StallDetector.from_history([[call("t", q=i)] if i else [] for i in seq])
    assert (restored.count, restored.last_signature) == (detector.count, detector.last_signature)
