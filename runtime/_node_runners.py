"""What runs a graph's nodes: the checks made when a run starts (every node has a
runner, every name it uses is known) and building the node actors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors import Actor, ActorRef

from ._errors import SpecError, SpecErrors
from .engine._function_node import FunctionNodeActor, PlainFunction
from .engine._runlog import RunLog
from .llm._names import check_named_providers, check_parallel_names
from .llm._node import LlmNodeActor
from .llm._parallel import BranchRunner
from .llm._support import SET_OUTPUT, resolve_judge
from .llm._tools import ToolRegistry
from .llm._verdict import JudgeProtocol
from .llm._verifier import VerifierNodeActor
from .providers._base import LlmProvider
from .spec._imports import resolve_callable
from .spec._model import GraphSpec, NodeSpec
from .spec._parallel import BranchStrategy

__all__ = ["RUNNABLE_KINDS", "NodeRunners"]

#: The node kinds ``_make_node`` has a runner for. A graph using another kind of the spec
#: is refused when its run starts (naming ``nodes[i].kind``), not when a run reaches it.
RUNNABLE_KINDS: frozenset[str] = frozenset({"function", "router", "llm", "verifier"})


class NodeRunners:
    """The part of :class:`Runtime` that checks a graph and builds its node actors."""

    provider: LlmProvider | None
    providers: dict[str, LlmProvider]
    functions: dict[str, Callable[..., Any]]
    tools: ToolRegistry
    branch_strategies: dict[str, BranchStrategy]
    allow_imports: tuple[str, ...]
    node_timeout: float | None
    tool_timeout: float | None
    context_budget_tokens: int
    judge_timeout: float
    _judge_map: dict[str, JudgeProtocol]
    _plain_cache: dict[str, PlainFunction]

    def _check_graph(self, graph: GraphSpec) -> None:
        """What a run would otherwise trip on only when it reaches a node: functions and
        judges that are neither registered nor allowed imports, unknown tools, LLM nodes
        without a provider."""
        errors: list[SpecError] = []
        for index, node in enumerate(graph.nodes):
            where = f"nodes[{index}]"
            if node.kind not in RUNNABLE_KINDS:
                errors.append(
                    SpecError(
                        f"{where}.kind",
                        f"this runtime cannot run {node.kind!r} nodes "
                        f"(it runs: {', '.join(sorted(RUNNABLE_KINDS))})",
                    )
                )
            try:
                if node.kind in ("function", "router") and node.function is not None:
                    resolve_callable(
                        node.function,
                        self.functions,
                        path=f"{where}.function",
                        allow_imports=self.allow_imports,
                    )
                if node.kind == "llm" and node.judge is not None:
                    self._judge_map.setdefault(
                        node.judge,
                        resolve_judge(
                            node.judge,
                            self._judge_map,
                            path=f"{where}.judge",
                            allow_imports=self.allow_imports,
                        ),
                    )
            except SpecError as exc:
                errors.append(exc)
            if node.kind == "llm":
                for j, name in enumerate(node.tools):
                    if name != SET_OUTPUT and name not in self.tools:
                        known = ", ".join(self.tools.names) or "none"
                        errors.append(
                            SpecError(
                                f"{where}.tools[{j}]",
                                f"no tool {name!r} is registered with the runtime (known: {known})",
                            )
                        )
                if self.provider is None:
                    errors.append(
                        SpecError(f"{where}.kind", "an llm node needs Runtime(provider=...)")
                    )
        errors.extend(check_named_providers(graph, self.provider_named))
        errors.extend(check_parallel_names(graph, self.provider_named, self.branch_strategies))
        if errors:
            raise SpecErrors(errors)

    def _resolve_plain(self, spec: NodeSpec) -> PlainFunction | None:
        if spec.function is None:
            return None
        plain = self._plain_cache.get(spec.function)
        if plain is None:
            function = resolve_callable(
                spec.function, self.functions, path=spec.id, allow_imports=self.allow_imports
            )
            plain = self._plain_cache[spec.function] = PlainFunction(function)
        return plain

    def _make_node(
        self, graph: GraphSpec, spec: NodeSpec, executor: ActorRef, log: RunLog
    ) -> Actor:
        if spec.kind in ("function", "router"):
            return FunctionNodeActor(
                graph, self._resolve_plain, executor, log, node_timeout=self.node_timeout
            )
        if spec.kind == "llm":
            return LlmNodeActor(
                spec,
                executor,
                log,
                provider=self.provider,
                tools=self.tools,
                judges=self._judge_map,
                context_budget_tokens=self.context_budget_tokens,
                judge_timeout=self.judge_timeout,
                branch_runner=None
                if spec.parallel is None
                else BranchRunner(
                    spec.parallel, providers=self.provider_named, strategies=self.branch_strategies
                ),
                node_timeout=self.node_timeout,
                tool_timeout=self.tool_timeout,
            )
        if spec.kind == "verifier":
            return VerifierNodeActor(graph, spec, executor, log, providers=self.provider_named)
        raise SpecError(f"node {spec.id}", f"node kind {spec.kind!r} is not supported yet")

    def provider_named(self, name: str | None) -> LlmProvider | None:
        """The provider registered as ``name`` (None: the runtime's ``provider``)."""
        return self.provider if name is None else self.providers.get(name)
