"""The ``llm_judge`` strategy of parallel branches: prompt, compaction, reply parsing.

The judge sees clean content only: the conversation before the request as a plain
transcript (text of user and assistant messages; tool calls, tool results and anything
else stripped), the request itself (the last user message before the branches ran), and
each branch's final answer. Candidates are numbered from 1 in the prompt ("Response 1"
is the first branch that answered, in branch order); the reply is scanned for its first
number, mapped back to that candidate, and any reply without a usable number falls back
to the first candidate.

When a token budget is given (the judge's context window less :data:`REPLY_RESERVE`),
the prompt is compacted in two iterations. Iteration 1 compacts the prior conversation
only, through three tiers (its last 80 lines; its first and last paragraphs; a hard
character limit from the budget left), answers intact. Iteration 2 keeps the
conversation at its tier-3 form and compacts each answer independently through the
same tiers (the character limit is the budget left shared equally, what a shorter
answer leaves going to the longer ones). A cut's ``[...]`` marker counts within its
limit, and a tier that would not shorten a part leaves it as it is. A budget still not
met after both is reported (``fits`` False) for the caller to record a warning. The
winner is always the branch's uncompacted answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from ..providers._base import ChatMessage

__all__ = [
    "DEFAULT_JUDGE_PROMPT",
    "REPLY_RESERVE",
    "JudgePrompt",
    "build_judge_prompt",
    "parse_choice",
    "split_query",
    "transcript",
]

#: Tokens of the judge's context window kept for its reply.
REPLY_RESERVE: Final = 512
#: Lines kept by tier 1.
TIER1_LINES: Final = 80
_CUT: Final = "[...]"

DEFAULT_JUDGE_PROMPT: Final = (
    "You compare candidate responses to the same request and pick the best one: the one "
    "that answers the request correctly and completely and follows its instructions. "
    "Reply with the number of the best response, and nothing else."
)


def tokens(text: str) -> int:
    """The estimate the conversation uses: ceil(chars / 4)."""
    return -(-len(text) // 4)


def split_query(messages: Sequence[ChatMessage]) -> tuple[list[ChatMessage], str]:
    """``(prior messages, query)``: the query is the last user message's text."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return list(messages[:index]), messages[index].content
    return list(messages), ""


def transcript(messages: Sequence[ChatMessage]) -> str:
    """A readable transcript of the text of user and assistant messages (and summaries)."""
    lines: list[str] = []
    for message in messages:
        text = message.content.strip()
        if not text or message.role == "tool":
            continue
        name = {"user": "User", "assistant": "Assistant", "system": "Summary"}[message.role]
        lines.append(f"{name}: {text}")
    return "\n\n".join(lines)


def _tier1(text: str, _limit: int) -> str:
    lines = text.splitlines()
    if len(lines) <= TIER1_LINES:
        return text
    return "\n".join([_CUT, *lines[-TIER1_LINES:]])


def _tier2(text: str, _limit: int) -> str:
    paragraphs = [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    if len(paragraphs) <= 2:
        return text
    return f"{paragraphs[0]}\n\n{_CUT}\n\n{paragraphs[-1]}"


def _tier3_end(text: str, limit: int) -> str:
    """The end of ``text`` (the most recent part of a conversation) in at most ``limit``
    characters, its marker included."""
    if len(text) <= limit:
        return text
    keep = limit - len(_CUT) - 1
    if keep <= 0:
        return _CUT if limit >= len(_CUT) else ""
    return f"{_CUT} {text[len(text) - keep :]}"


def _tier3_start(text: str, limit: int) -> str:
    """The opening of ``text`` (an answer) in at most ``limit`` characters, its marker
    included."""
    if len(text) <= limit:
        return text
    keep = limit - len(_CUT) - 1
    if keep <= 0:
        return _CUT if limit >= len(_CUT) else ""
    return f"{text[:keep]} {_CUT}"


def _shorter(tier: Callable[[str, int], str], text: str, limit: int) -> str:
    """What ``tier`` makes of ``text``, unless that is not shorter."""
    cut = tier(text, limit)
    return cut if len(cut) < len(text) else text


def _shares(lengths: Sequence[int], room: int) -> list[int]:
    """Each part's character limit: ``room`` shared equally, what a shorter part does not
    use going to the longer ones."""
    shares = [0] * len(lengths)
    left = len(lengths)
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        shares[index] = min(lengths[index], room // left)
        room -= shares[index]
        left -= 1
    return shares


class JudgePrompt:
    """The judge's user message and what compaction did to fit it."""

    __slots__ = ("compacted", "fits", "text", "tokens")

    def __init__(self, text: str, *, fits: bool, compacted: bool) -> None:
        self.text = text
        self.fits = fits
        self.compacted = compacted
        self.tokens = tokens(text)


def _render(context: str, query: str, answers: Sequence[str]) -> str:
    parts = []
    if context:
        parts.append(f"Conversation so far:\n{context}")
    parts.append(f"Request:\n{query}")
    for number, answer in enumerate(answers, start=1):
        parts.append(f"Response {number}:\n{answer}")
    parts.append(f"Which response is best? Answer with its number, 1 to {len(answers)}.")
    return "\n\n".join(parts)


def build_judge_prompt(
    context: str, query: str, answers: Sequence[str], *, budget: int | None
) -> JudgePrompt:
    """The judge's message, compacted to ``budget`` tokens when given (see module docs)."""
    original = _render(context, query, answers)
    if budget is None or tokens(original) <= budget:
        return JudgePrompt(original, fits=True, compacted=False)

    def size(ctx: str, outs: Sequence[str]) -> int:
        return tokens(_render(ctx, query, outs))

    # Counted in characters: a prompt of at most budget * 4 characters is within budget.
    limit = budget * 4

    def room(ctx: str, outs: Sequence[str], part: str) -> int:
        """Characters ``part`` may take: what the rest of the prompt leaves of the budget."""
        return max(0, limit - (len(_render(ctx, query, outs)) - len(part)))

    outputs = list(answers)
    tiers: list[Callable[[str, int], str]] = [_tier1, _tier2, _tier3_end]
    # Iteration 1: the prior conversation only; the answers stay intact.
    for tier in tiers:
        if size(context, outputs) <= budget:
            break
        context = _shorter(tier, context, room(context, outputs, context))
    if size(context, outputs) <= budget:
        return JudgePrompt(_render(context, query, outputs), fits=True, compacted=True)
    # Iteration 2: the conversation stays in its tier-3 form; each answer independently.
    for tier in (_tier1, _tier2, _tier3_start):
        if size(context, outputs) <= budget:
            break
        left = max(0, limit - len(_render(context, query, [""] * len(outputs))))
        shares = _shares([len(output) for output in outputs], left)
        outputs = [_shorter(tier, o, share) for o, share in zip(outputs, shares, strict=True)]
    text = _render(context, query, outputs)
    return JudgePrompt(text, fits=tokens(text) <= budget, compacted=True)


_FIRST_NUMBER = re.compile(r"\d+")


def parse_choice(reply: str, count: int) -> int | None:
    """The 0-based candidate the reply names (its first number, 1-based), or None."""
    match = _FIRST_NUMBER.search(reply)
    if match is None or len(match.group(0)) > 6:
        return None
    number = int(match.group(0))
    return number - 1 if 1 <= number <= count else None
