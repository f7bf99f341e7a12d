"""What runs a graph's nodes: the checks made when a run starts (every node has a
runner, every name it uses is known) and building the node actors."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from actors import Actor, ActorRef

from ._config import TimeoutConfig
from ._errors import SpecError, SpecErrors
from .engine._function_node import FunctionNodeActor, PlainFunction
from .engine._runlog import RunLog
from .llm._goals import score_goal
from .llm._names import check_named_providers, check_parallel_names
from .llm._node import LlmNodeActor
from .llm._parallel import BranchRunner
from .llm._support import SET_OUTPUT, resolve_judge
from .llm._tools import Tool, ToolRegistry
from .llm._verdict import JudgeProtocol
from .llm._verifier import VerifierNodeActor
from .providers._base import LlmProvider
from .spec._imports import import_reference, resolve_callable
from .spec._model import GraphSpec, NodeSpec
from .spec._parallel import BranchStrategy

__all__ = ["RUNNABLE_KINDS", "NodeFactory"]

#: The node kinds :meth:`NodeFactory.build` has a runner for. A graph using another kind of the spec
#: is refused when its run starts (naming ``nodes[i].kind``), not when a run reaches it.
RUNNABLE_KINDS: frozenset[str] = frozenset({"function", "router", "llm", "verifier"})


class NodeFactory:
    """What a runtime knows to run nodes with (the registered functions, tools, judges and
    providers, the import policy, the time limits): it checks a graph before a run starts
    and builds each node's actor when the run reaches it.

    ``provider`` serves LLM nodes, judges and llm_decide edges; ``providers`` are further
    providers a spec names. ``allow_imports`` lists the module prefixes from which a graph
    may import callables and judges by ``"package.module:attr"`` path; names found there
    are remembered, so a later run resolves them the same way.
    """

    def __init__(
        self,
        *,
        provider: LlmProvider | None = None,
        providers: Mapping[str, LlmProvider] | None = None,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        tools: ToolRegistry | Iterable[Tool] | None = None,
        judges: Mapping[str, JudgeProtocol] | None = None,
        branch_strategies: Mapping[str, BranchStrategy] | None = None,
        allow_imports: Sequence[str] = (),
        timeouts: TimeoutConfig | None = None,
        context_budget_tokens: int = 60_000,
    ) -> None:
        if isinstance(allow_imports, str):
            raise TypeError("allow_imports is a sequence of module prefixes, not one string")
        self.provider = provider
        self.providers: dict[str, LlmProvider] = dict(providers or {})
        self.functions: dict[str, Callable[..., Any]] = dict(functions or {})
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools or ())
        # The registered judges plus those imported (under allow_imports) by checked graphs.
        self.judges: dict[str, JudgeProtocol] = dict(judges or {})
        self.branch_strategies: dict[str, BranchStrategy] = dict(branch_strategies or {})
        self.allow_imports: tuple[str, ...] = tuple(allow_imports)
        self.timeouts = timeouts or TimeoutConfig()
        self.context_budget_tokens = context_budget_tokens
        # What each run is handed, made once here rather than per run (a bound method or
        # a partial per run is one more object a live run holds for the cyclic collector).
        # None of them refers back to this factory, so no cycle runs through them.
        # A bound method, not the resolver itself: called once a step, and a bound method's
        # call is cheaper than a Python __call__'s.
        self._resolve_plain = _PlainResolver(self.functions, self.allow_imports).resolve
        self._named = _NamedProviders(self.provider, self.providers)
        #: The goal scorer a run's executor is given (providers by name from here).
        self.score_goal = partial(score_goal, providers=self._named)

    def _import_tool(self, reference: str, path: str) -> None:
        """Register the tool a graph names by ``"module:attr"`` (a Tool, or a function
        made one), imported only under ``allow_imports``; raises SpecError naming
        ``path`` otherwise."""
        target = import_reference(
            reference, self.allow_imports, path=path, what="tool", defined_by=_tool_function
        )
        if not isinstance(target, Tool):
            if not callable(target) or isinstance(target, type):
                raise SpecError(path, f"{reference!r} is neither a Tool nor a function")
            target = Tool.from_callable(target)
        self.tools.alias(reference, target)

    def check(self, graph: GraphSpec) -> None:
        """Raise SpecErrors for what a run would otherwise trip on only when it reaches a
        node: kinds without a runner, functions and judges that are neither registered nor
        allowed imports, unknown tools, LLM nodes and ``llm_decide`` edges without a
        provider, unknown named providers and branch strategies."""
        names = graph.derived(_plain_functions)
        if names is not None:
            functions = self.functions
            for name in names:
                if name not in functions:
                    break
            else:
                return  # function and router nodes only, each naming a registered function
        errors: list[SpecError] = []
        for index, node in enumerate(graph.nodes):
            where = f"nodes[{index}]"
            named = len(errors)  # this node's problems name it (nodes[3] says little)
            self._check_node(node, where, errors)
            errors[named:] = [
                SpecError(e.path, f"{e.reason} (node {node.id!r})") for e in errors[named:]
            ]
        if self.provider is None:
            errors.extend(
                SpecError(
                    f"edges[{i}].condition",
                    "an llm_decide edge needs a provider to choose (--provider on the command "
                    "line, Runtime(provider=...) in an app): without one every run would take "
                    "its fallback",
                )
                for i, edge in enumerate(graph.edges)
                if edge.condition == "llm_decide"
            )
        errors.extend(check_named_providers(graph, self.provider_named))
        errors.extend(check_parallel_names(graph, self.provider_named, self.branch_strategies))
        if errors:
            raise SpecErrors(errors)

    def _check_node(self, node: NodeSpec, where: str, errors: list[SpecError]) -> None:
        """:meth:`check` of one node (``where``: its path), its problems added to ``errors``."""
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
                self.judges.setdefault(
                    node.judge,
                    resolve_judge(
                        node.judge,
                        self.judges,
                        path=f"{where}.judge",
                        allow_imports=self.allow_imports,
                    ),
                )
        except SpecError as exc:
            errors.append(exc)
        if node.kind == "llm":
            for j, name in enumerate(node.tools):
                if name != SET_OUTPUT and name not in self.tools and ":" in name:
                    try:
                        self._import_tool(name, f"{where}.tools[{j}]")
                    except SpecError as exc:
                        errors.append(exc)
                    continue
                if name != SET_OUTPUT and name not in self.tools:
                    known = ", ".join(self.tools.names) or "none"
                    errors.append(
                        SpecError(
                            f"{where}.tools[{j}]",
                            f"no tool {name!r} is registered with the runtime (known: {known}; "
                            "--tools MODULE on the command line, Runtime(tools=...) in "
                            "an app)",
                        )
                    )
            if self.provider is None:
                errors.append(
                    SpecError(
                        f"{where}.kind",
                        "an llm node needs a provider (--provider on the command line, "
                        "Runtime(provider=...) in an app)",
                    )
                )

    def __call__(self, graph: GraphSpec, spec: NodeSpec, executor: ActorRef, log: RunLog) -> Actor:
        """:meth:`build`: the factory itself is what a run's executor is given."""
        return self.build(graph, spec, executor, log)

    def build(self, graph: GraphSpec, spec: NodeSpec, executor: ActorRef, log: RunLog) -> Actor:
        """The actor that runs ``spec`` for the run of ``executor`` (SpecError for a kind
        without a runner, which :meth:`check` refuses first)."""
        if spec.kind in ("function", "router"):
            return FunctionNodeActor(
                graph, self._resolve_plain, executor, log, node_timeout=self.timeouts.node
            )
        if spec.kind == "llm":
            return LlmNodeActor(
                spec,
                executor,
                log,
                provider=self.provider,
                tools=self.tools,
                judges=self.judges,
                context_budget_tokens=self.context_budget_tokens,
                judge_timeout=self.timeouts.judge,
                branch_runner=None
                if spec.parallel is None
                else BranchRunner(
                    spec.parallel, providers=self.provider_named, strategies=self.branch_strategies
                ),
                node_timeout=self.timeouts.node,
                tool_timeout=self.timeouts.tool,
            )
        if spec.kind == "verifier":
            return VerifierNodeActor(graph, spec, executor, log, providers=self.provider_named)
        raise SpecError(f"node {spec.id}", f"node kind {spec.kind!r} is not supported yet")

    def provider_named(self, name: str | None) -> LlmProvider | None:
        """The provider registered as ``name`` (None: the runtime's ``provider``)."""
        return self._named(name)


def _plain_functions(graph: GraphSpec) -> tuple[str, ...] | None:
    """The functions a graph of function and router nodes alone names, when nothing else
    in it needs checking against a runtime (no verifier, parallel branches, goal
    evaluator or ``llm_decide`` edge); None for any other graph (NodeFactory.check looks
    at every node)."""
    goal = graph.goal
    if goal is not None and goal.evaluator is not None:
        return None
    if any(edge.condition == "llm_decide" for edge in graph.edges):
        return None  # its choices need a provider
    names: list[str] = []
    for node in graph.nodes:
        if node.kind not in _PLAIN or node.verifier is not None or node.parallel is not None:
            return None
        if node.function is not None:
            names.append(node.function)
    return tuple(dict.fromkeys(names))


_PLAIN = ("function", "router")


class _PlainResolver:
    """A function node's callable by its spec (None for a router without one), resolved
    once per name and remembered."""

    __slots__ = ("allow_imports", "cache", "functions")

    def __init__(self, functions: dict[str, Callable[..., Any]], allow_imports: tuple[str, ...]):
        self.functions = functions
        self.allow_imports = allow_imports
        self.cache: dict[str, PlainFunction] = {}

    def resolve(self, spec: NodeSpec) -> PlainFunction | None:
        """The callable of ``spec`` (None for a router without one)."""
        if spec.function is None:
            return None
        plain = self.cache.get(spec.function)
        if plain is None:
            function = resolve_callable(
                spec.function, self.functions, path=spec.id, allow_imports=self.allow_imports
            )
            plain = self.cache[spec.function] = PlainFunction(function)
        return plain


class _NamedProviders:
    """The provider registered as a name (None: the runtime's own provider)."""

    __slots__ = ("provider", "providers")

    def __init__(self, provider: LlmProvider | None, providers: dict[str, LlmProvider]):
        self.provider = provider
        self.providers = providers

    def __call__(self, name: str | None) -> LlmProvider | None:
        return self.provider if name is None else self.providers.get(name)


def _tool_function(target: Any) -> Any:
    """What defines an imported tool: its function (a Tool object is defined by the
    runtime's own module)."""
    return target.fn if isinstance(target, Tool) else target
