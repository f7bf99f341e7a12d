"""The parallel-branch judge's prompt compaction (runtime.llm._branch_judge): every cut is
sized with its marker, so a prompt compacted to its budget stays within it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.llm._branch_judge import build_judge_prompt, tokens

ANSWERS = ["FINAL-A: the Nile", "FINAL-B: the Amazon"]
QUERY = "Which river is the longest? Answer as FINAL-X: <river>."


def test_a_conversation_cut_to_its_room_leaves_the_prompt_within_budget() -> None:
    # One long paragraph: tiers 1 and 2 change nothing, tier 3 cuts it to the room left.
    context = "User: " + "tell me about rivers and their lengths " * 400
    prompt = build_judge_prompt(context, QUERY, ANSWERS, budget=1_536)
    assert prompt.compacted and prompt.fits
    assert prompt.tokens <= 1_536
    # Iteration 1 was enough: the short answers are intact.
    for answer in ANSWERS:
        assert f"\n{answer}\n" in prompt.text
    assert "Conversation so far:\n[...] " in prompt.text


def test_answers_are_cut_with_their_marker_within_their_share() -> None:
    answers = ["short", "B" * 5_000, "C" * 9_000]
    prompt = build_judge_prompt("", QUERY, answers, budget=1_000)
    assert prompt.fits and prompt.tokens <= 1_000
    # The short answer keeps its text; what it leaves goes to the longer ones, equally.
    assert "Response 1:\nshort\n" in prompt.text
    kept_b = prompt.text.split("Response 2:\n")[1].split("\n")[0]
    kept_c = prompt.text.split("Response 3:\n")[1].split("\n")[0]
    assert kept_b.endswith(" [...]") and kept_c.endswith(" [...]")
    assert abs(len(kept_b) - len(kept_c)) <= 1


def test_a_cut_never_makes_a_part_longer() -> None:
    # Paragraphs shorter than the marker: tier 2 would lengthen the answer; it is kept.
    answers = ["a\n\nb\n\nc", "x" * 4_000]
    prompt = build_judge_prompt("", QUERY, answers, budget=600)
    assert "Response 1:\na\n\nb\n\nc\n" in prompt.text
    assert prompt.fits


_text = st.text(alphabet=st.sampled_from("ab \n."), max_size=3_000)


@settings(max_examples=300, deadline=None)
@given(
    context=_text,
    answers=st.lists(_text, min_size=1, max_size=4),
    budget=st.integers(min_value=1, max_value=1_200),
)
def test_whatever_can_fit_fits(context: str, answers: list[str], budget: int) -> None:
    prompt = build_judge_prompt(context, QUERY, answers, budget=budget)
    assert prompt.fits == (prompt.tokens <= budget)
    # The prompt's frame (the request and the empty candidates) fits: then so does the
    # compacted prompt, markers included.
    frame = build_judge_prompt("", QUERY, [""] * len(answers), budget=None)
    if frame.tokens <= budget:
        assert prompt.fits, (prompt.tokens, budget)
    if tokens(build_judge_prompt(context, QUERY, answers, budget=None).text) <= budget:
        assert not prompt.compacted
