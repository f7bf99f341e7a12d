"""Parallel-branch evaluation of an LLM node: the spec types and their validation.

An LLM node with ``parallel`` set runs each of its turns as N branches: N independent
runs of the LLM loop (model call, tool calls, model call ... until the model answers
without tool calls), concurrently, each from a copy of the same conversation, each with
its own model, temperature or prompt. A strategy picks one branch; only the winner's
messages continue the node's conversation, and the node's judge rules on the winner's
final answer as on any turn (RETRY runs another round of branches).

Strategies (``strategy``): ``llm_judge`` (a judge model reads the candidates and names
the best), ``first_success`` (the branch that finished first), ``fewest_tokens`` /
``most_tokens`` (input plus output tokens of the branch's turns), ``majority_vote`` (the
most common final answer, compared in a normalised form: lower case, punctuation and
extra spaces dropped), or the name of a strategy object registered with
``Runtime(branch_strategies=...)`` (see :class:`BranchStrategy`). Ties go to the branch
listed first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Final, Protocol, runtime_checkable

import msgspec

from .._errors import SpecError

__all__ = [
    "BUILTIN_STRATEGIES",
    "BranchCandidate",
    "BranchJudgeSpec",
    "BranchSpec",
    "BranchStrategy",
    "ParallelSpec",
    "check_parallel",
]

BUILTIN_STRATEGIES: Final = (
    "llm_judge",
    "first_success",
    "fewest_tokens",
    "most_tokens",
    "majority_vote",
)
MAX_BRANCHES: Final = 16


class _Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Frozen, keyword-only, unknown fields refused (as every spec struct)."""


class BranchSpec(_Config, frozen=True):
    """One branch: what differs from the node's own settings (None: the node's)."""

    #: Shown in events and to custom strategies; default ``branch <n>`` (1-based).
    label: str = ""
    #: A provider registered with ``Runtime(providers=...)``; None: the runtime's provider.
    provider: str | None = None
    model: str | None = None
    temperature: float | None = None
    #: Replaces the node's ``system_prompt`` (the focus layer of the system prompt).
    system_prompt: str | None = None


class BranchJudgeSpec(_Config, frozen=True):
    """The judge of the ``llm_judge`` strategy.

    ``max_context_tokens`` is the judge model's context window: the prompt (prior
    conversation, query, every branch's answer) is compacted to fit it, less 512 tokens
    kept for the reply; None passes everything as it is.
    """

    provider: str | None = None
    model: str | None = None
    max_context_tokens: int | None = None
    #: Replaces the built-in instructions of the judge.
    system_prompt: str | None = None


class ParallelSpec(_Config, frozen=True):
    """``NodeSpec.parallel``: run each turn of the LLM node as ``branches``, pick one."""

    branches: list[BranchSpec]
    strategy: str = "llm_judge"
    judge: BranchJudgeSpec = BranchJudgeSpec()
    #: Model calls one branch may make in one round before it must answer (fewer when the
    #: node has fewer turns left under its ``max_iterations``: it then ends with those).
    max_turns: int = 8


class BranchCandidate(msgspec.Struct, frozen=True, kw_only=True):
    """A branch that finished a round with an answer, as strategies see it.

    ``index`` is the branch's position in ``ParallelSpec.branches`` (0-based);
    ``finished`` its rank in finishing order (0: first); ``text`` its final answer.
    """

    index: int
    label: str
    text: str
    input_tokens: int
    output_tokens: int
    turns: int
    finished: int
    model: str = ""


@runtime_checkable
class BranchStrategy(Protocol):
    """A custom strategy: return the ``index`` of the chosen candidate.

    ``select`` may be sync or async; ``query`` is the request the branches answered.
    Returning an index that is not a candidate's falls back to the first candidate, a check
    that did not run (a judge failure of kind ``branch_judge``).
    """

    def select(self, candidates: Sequence[BranchCandidate], query: str) -> int | Awaitable[int]: ...


def branch_label(spec: BranchSpec, index: int) -> str:
    return spec.label or f"branch {index + 1}"


def check_parallel(where: str, kind: str, spec: ParallelSpec) -> list[SpecError]:
    """Validation problems of a node's ``parallel`` option, each naming its field."""
    path = f"{where}.parallel"
    errors: list[SpecError] = []
    if kind != "llm":
        errors.append(SpecError(path, f"only llm nodes take 'parallel' (kind is {kind!r})"))
    if not 2 <= len(spec.branches) <= MAX_BRANCHES:
        errors.append(
            SpecError(
                f"{path}.branches",
                f"needs 2 to {MAX_BRANCHES} branches, got {len(spec.branches)}",
            )
        )
    labels: set[str] = set()
    for i, branch in enumerate(spec.branches):
        label = branch_label(branch, i)
        if label in labels:
            errors.append(SpecError(f"{path}.branches[{i}].label", f"duplicate label {label!r}"))
        labels.add(label)
        if branch.temperature is not None and not 0.0 <= branch.temperature <= 2.0:
            errors.append(
                SpecError(
                    f"{path}.branches[{i}].temperature",
                    f"must be between 0 and 2, got {branch.temperature}",
                )
            )
    if not spec.strategy:
        errors.append(SpecError(f"{path}.strategy", "must name a strategy"))
    if not 1 <= spec.max_turns <= 100:
        errors.append(SpecError(f"{path}.max_turns", f"must be 1..100, got {spec.max_turns}"))
    budget = spec.judge.max_context_tokens
    if budget is not None and not 1_024 <= budget <= 10_000_000:
        errors.append(
            SpecError(f"{path}.judge.max_context_tokens", f"must be 1024..10000000, got {budget}")
        )
    return errors
