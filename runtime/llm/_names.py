"""The names a graph gives that the runtime must supply: providers and branch strategies.

LLM parts find a provider by name through a :data:`ProviderLookup`; at start, before a
run begins, :func:`check_named_providers` and :func:`check_parallel_names` report every
name that nothing configured answers to, with the path of the field that gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._errors import SpecError
from ..providers._base import LlmProvider
from ..spec._model import GraphSpec
from ..spec._parallel import BUILTIN_STRATEGIES, BranchStrategy
from ..spec._verifier import LlmJudgeVerifier

__all__ = ["ProviderLookup", "check_named_providers", "check_parallel_names"]

#: Looks up a provider by the evaluator name of an llm_judge verifier (None: the default).
ProviderLookup = Callable[[str | None], LlmProvider | None]


def check_named_providers(graph: GraphSpec, providers: ProviderLookup) -> list[SpecError]:
    """Start-time problems: an ``llm_judge`` verifier's or the goal's evaluator that names
    no configured provider."""
    errors: list[SpecError] = []
    for index, node in enumerate(graph.nodes):
        if isinstance(node.verifier, LlmJudgeVerifier):
            name = node.verifier.evaluator
            if providers(name) is None:
                reason = (
                    "no provider is configured (Runtime(provider=...))"
                    if name is None
                    else f"no provider {name!r} in Runtime(providers=...)"
                )
                errors.append(SpecError(f"nodes[{index}].verifier.evaluator", reason))
    goal = graph.goal
    if goal is not None and goal.evaluator is not None and providers(goal.evaluator) is None:
        errors.append(
            SpecError("goal.evaluator", f"no provider {goal.evaluator!r} in Runtime(providers=...)")
        )
    return errors


def check_parallel_names(
    graph: GraphSpec, providers: ProviderLookup, strategies: Mapping[str, BranchStrategy]
) -> list[SpecError]:
    """Start-time problems of parallel nodes: providers and strategies not configured."""
    errors: list[SpecError] = []
    for index, node in enumerate(graph.nodes):
        spec = node.parallel
        if spec is None:
            continue
        where = f"nodes[{index}].parallel"
        for j, branch in enumerate(spec.branches):
            if providers(branch.provider) is None:
                errors.append(
                    SpecError(f"{where}.branches[{j}].provider", _missing(branch.provider))
                )
        if spec.strategy == "llm_judge" and providers(spec.judge.provider) is None:
            errors.append(SpecError(f"{where}.judge.provider", _missing(spec.judge.provider)))
        if spec.strategy not in BUILTIN_STRATEGIES and spec.strategy not in strategies:
            known = ", ".join([*BUILTIN_STRATEGIES, *sorted(strategies)])
            errors.append(
                SpecError(
                    f"{where}.strategy",
                    f"no strategy {spec.strategy!r} (known: {known}; register custom ones "
                    "with Runtime(branch_strategies=...))",
                )
            )
    return errors


def _missing(name: str | None) -> str:
    if name is None:
        return "no provider is configured (Runtime(provider=...))"
    return f"no provider {name!r} in Runtime(providers=...)"
