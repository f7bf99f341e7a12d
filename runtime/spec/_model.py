"""Graph specs: the declarative description of a graph, its nodes, edges and goal.

Every spec type is a frozen, kw_only msgspec Struct that refuses unknown fields, so the
same schema loads from Python, TOML, YAML and JSON (see ``_load``) and a typo in a
file is an error naming the field. Validation beyond types (unknown nodes, unreachable
nodes, bad expressions, ...) lives in ``_validate``. The file format is documented
in ``docs/GRAPH_FORMAT.md``.
"""

from __future__ import annotations

import hashlib
import importlib
import weakref
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from tenacity import RetryCallState, wait_exponential_jitter

from .._errors import SpecError
from ._goal import Constraint, SuccessCriterion
from ._parallel import ParallelSpec
from ._verifier import VerifierSpec

__all__ = [
    "EdgeCondition",
    "EdgeSpec",
    "Goal",
    "GraphSpec",
    "MemoryKey",
    "NodeEdges",
    "NodeKind",
    "NodeSpec",
    "RetryPolicy",
    "VerifierSpec",
    "compact_graph_dict",
    "function_ref",
    "graph_hash",
    "graph_to_dict",
    "memory_reducers",
]

NodeKind = Literal["function", "router", "llm", "verifier"]
EdgeCondition = Literal["always", "on_success", "on_failure", "conditional", "llm_decide"]


class _Spec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every spec struct: frozen, keyword-only, unknown fields refused."""


class Goal(_Spec, frozen=True):
    """The whole job: what it is for, how success is judged, which rules bind it.

    Criteria and constraints are strings (guidance for LLM nodes) or objects that are
    also measured when the run ends (see ``_goal``); ``evaluator`` names the provider
    (``Runtime(providers=...)``) that scores criteria without an expression.
    """

    description: str
    success_criteria: list[str | SuccessCriterion] = []
    constraints: list[str | Constraint] = []
    evaluator: str | None = None


class RetryPolicy(_Spec, frozen=True):
    """Executor retries of plain (non-LLM) nodes: exponential backoff, in seconds.

    Attempt ``n`` (1-based) that failed waits
    ``min(max_delay, initial_delay * multiplier**(n-1)) + uniform(0, jitter)``.
    ``max_attempts`` counts the first attempt: 1 means no retry.
    """

    max_attempts: int = 3
    initial_delay: float = 0.1
    max_delay: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.1


class MemoryKey(_Spec, frozen=True):
    """A declared memory key and how writes to it combine.

    ``replace`` overwrites; ``append`` appends the written value to a list; ``merge``
    merges a written dict into the stored dict (written keys win). Undeclared keys
    behave as ``replace``.
    """

    name: str
    reducer: Literal["replace", "append", "merge"] = "replace"


class NodeSpec(_Spec, frozen=True):
    """One node: what it reads and writes, how it runs, how it is judged and retried."""

    id: str
    kind: NodeKind = "function"
    description: str = ""
    #: ``"package.module:function"`` import path, or a name registered with the runtime.
    function: str | None = None
    input_keys: list[str] = []
    output_keys: list[str] = []
    #: Output keys the node may leave unset (or set to None) and still succeed.
    nullable_keys: list[str] = []
    #: None: the graph's ``retry`` policy. Never applied to LLM nodes (the judge retries).
    retry: RetryPolicy | None = None
    #: Seconds one attempt may take before it fails with NodeTimeoutError (then retry
    #: policy and on_failure edges apply as for any failure). None: the runtime's
    #: ``node_timeout``.
    timeout: float | None = None
    #: Seconds one tool call of an LLM node may take before the node fails with
    #: ToolTimeoutError. None: the runtime's ``tool_timeout``.
    tool_timeout: float | None = None
    # LLM (event loop) node fields.
    #: The focus layer (innermost) of the onion-model system prompt.
    system_prompt: str = ""
    success_criteria: list[str] = []
    tools: list[str] = []
    max_iterations: int = 50
    #: Identical tool-call turns in a row that make a stall warning (and a RETRY).
    stall_threshold: int = 3
    #: Import path or registered name of a custom judge; None: the implicit cascade.
    judge: str | None = None
    judge_every_n_turns: int = 1
    #: When the judge itself fails: False accepts (the default safety net), True fails.
    judge_fail_closed: bool = False
    client_facing: bool = False
    model: str | None = None
    # Verifier node fields.
    verifier: VerifierSpec | None = None
    #: LLM nodes: run each turn as parallel branches and pick one (see ``_parallel_spec``).
    parallel: ParallelSpec | None = None


class EdgeSpec(_Spec, frozen=True):
    """A directed edge and when it fires (see docs/GRAPH_FORMAT.md, "Edge semantics")."""

    source: str
    target: str
    condition: EdgeCondition = "on_success"
    #: Required for ``conditional`` edges, forbidden on the others.
    expression: str | None = None
    priority: int = 0
    #: For ``llm_decide``: the node taken when the model fails or names no candidate.
    fallback: str | None = None
    description: str = ""


class NodeEdges:
    """A node's outgoing edges as edge resolution reads them, sorted once per graph.

    Each group holds ``(index in edges, edge)`` pairs, highest priority first, then in
    declaration order (the whole order when nobody sets a priority, as the seed requires
    for conditional edges). ``on_failure``: on_failure and always edges; ``on_success``:
    on_success and always edges.
    """

    __slots__ = ("conditional", "llm_decide", "on_failure", "on_success", "single")

    def __init__(self, edges: list[tuple[int, EdgeSpec]]) -> None:
        ordered = sorted(edges, key=lambda pair: (-pair[1].priority, pair[0]))
        self.conditional = tuple(p for p in ordered if p[1].condition == "conditional")
        self.llm_decide = tuple(p for p in ordered if p[1].condition == "llm_decide")
        self.on_success = tuple(p for p in ordered if p[1].condition in ("on_success", "always"))
        self.on_failure = tuple(p for p in ordered if p[1].condition in ("on_failure", "always"))
        #: The one edge a success takes whatever memory holds (no conditional or
        #: llm_decide edge, one on_success or always edge), else None: most steps' edge.
        self.single = (
            self.on_success[0]
            if len(self.on_success) == 1 and not self.conditional and not self.llm_decide
            else None
        )


_NO_EDGES = NodeEdges([])


class _Index:
    """Lookups derived from a GraphSpec, built once per instance."""

    __slots__ = (
        "builtins",
        "derived",
        "edges",
        "hash",
        "nodes",
        "outgoing",
        "pauses",
        "single",
        "terminal",
        "valid",
    )

    def __init__(self, graph: GraphSpec) -> None:
        self.hash: str | None = None  # graph_hash, once computed
        self.builtins: dict[str, Any] | None = None  # shared_graph_dict, once computed
        self.valid = False  # validate_graph found no problem
        self.derived: dict[Callable[[GraphSpec], Any], Any] = {}  # GraphSpec.derived's
        self.nodes: dict[str, NodeSpec] = {}
        for node in graph.nodes:
            self.nodes.setdefault(node.id, node)  # the first wins; validation flags dupes
        self.outgoing: dict[str, list[tuple[int, EdgeSpec]]] = {}
        for index, edge in enumerate(graph.edges):
            self.outgoing.setdefault(edge.source, []).append((index, edge))
        self.edges: dict[str, NodeEdges] = {}  # filled as nodes are resolved
        self.single: dict[str, tuple[int, EdgeSpec]] | None = None  # single_edges, once made
        # Shared by every run of the graph (not a frozenset of each per run).
        self.terminal = frozenset(graph.terminal_nodes)
        self.pauses = frozenset(graph.pause_nodes)


# Frozen structs cannot hold a cache attribute, so the index lives beside the instance,
# keyed by id() and dropped by a finalizer when the instance dies (before id reuse).
_INDEXES: dict[int, _Index] = {}


class GraphSpec(_Spec, frozen=True, kw_only=True, weakref=True):
    """A whole graph. Check it with ``validate_graph`` (the loaders do) before running."""

    id: str
    version: str = "1"
    goal: Goal | None = None
    nodes: list[NodeSpec]
    edges: list[EdgeSpec] = []
    entry_node: str
    terminal_nodes: list[str] = []
    #: Human-in-the-loop gates: the run pauses when it reaches one of these nodes.
    pause_nodes: list[str] = []
    max_steps: int = 100
    conversation_mode: Literal["continuous", "isolated"] = "continuous"
    fan_out_policy: Literal["fail_all", "continue_others", "wait_all"] = "fail_all"
    conflict_strategy: Literal["last_wins", "first_wins", "error"] = "last_wins"
    memory: list[MemoryKey] = []
    #: The identity layer (outermost) of the onion-model system prompt.
    identity: str = ""
    #: The narrative layer (graph-level context) of the system prompt.
    narrative: str = ""
    retry: RetryPolicy = RetryPolicy()
    durability: Literal["sync", "async"] = "sync"

    def _index(self) -> _Index:
        try:
            return _INDEXES[id(self)]
        except KeyError:
            key = id(self)
            index = _INDEXES[key] = _Index(self)
            weakref.finalize(self, _INDEXES.pop, key, None)
            return index

    def _adopt(self, known: _Index) -> None:
        """Take what ``known``, the index of an equal valid spec (same graph hash), derived
        from the content alone: validity, hash and compact form. The lookups stay this
        instance's own (they hand out its nodes and edges)."""
        index = self._index()
        index.valid, index.hash, index.builtins = True, known.hash, known.builtins

    def node(self, node_id: str) -> NodeSpec:
        """The node with this id (a dict lookup). Raises SpecError if there is none."""
        try:
            return self._index().nodes[node_id]
        except KeyError:
            raise SpecError("nodes", f"no node with id {node_id!r}") from None

    def has_node(self, node_id: str) -> bool:
        """Whether a node with this id exists."""
        return node_id in self._index().nodes

    def outgoing(self, node_id: str) -> list[tuple[int, EdgeSpec]]:
        """``(index in edges, edge)`` for every edge leaving ``node_id``, in declaration order.

        The returned list is shared: do not mutate it.
        """
        return self._index().outgoing.get(node_id, [])

    def node_edges(self, node_id: str) -> NodeEdges:
        """The edges leaving ``node_id``, grouped and sorted for resolution (shared)."""
        index = self._index()
        edges = index.edges.get(node_id)
        if edges is None:
            pairs = index.outgoing.get(node_id)
            edges = index.edges[node_id] = NodeEdges(pairs) if pairs else _NO_EDGES
        return edges

    def single_edges(self) -> dict[str, tuple[int, EdgeSpec]]:
        """Node id -> its ``NodeEdges.single`` edge, for the nodes that have one; made once
        per instance, shared: do not mutate it."""
        index = self._index()
        if index.single is None:
            single = {node: self.node_edges(node).single for node in index.nodes}
            index.single = {node: pair for node, pair in single.items() if pair is not None}
        return index.single

    def node_map(self) -> dict[str, NodeSpec]:
        """Node id -> spec (first of duplicates), shared: do not mutate it."""
        return self._index().nodes

    def terminal_set(self) -> frozenset[str]:
        """``terminal_nodes`` as a set, made once per instance."""
        return self._index().terminal

    def derived(self, make: Callable[[GraphSpec], Any]) -> Any:
        """``make(self)``, made once per instance and kept beside it: for what a run derives
        from the spec's content alone (``make`` is a module-level function)."""
        memo = self._index().derived
        try:
            return memo[make]
        except KeyError:
            value = memo[make] = make(self)
            return value

    def pause_set(self) -> frozenset[str]:
        """``pause_nodes`` as a set, made once per instance."""
        return self._index().pauses


def memory_reducers(graph: GraphSpec) -> dict[str, str]:
    """Memory key -> its declared reducer (for ``GraphSpec.derived``: shared, read only)."""
    return {key.name: key.reducer for key in graph.memory}


def graph_to_dict(graph: GraphSpec) -> dict[str, Any]:
    """Plain builtins (every field, defaults included); ``graph_from_dict`` inverts it."""
    result: dict[str, Any] = msgspec.to_builtins(graph)
    return result


def compact_graph_dict(graph: GraphSpec) -> dict[str, Any]:
    """Plain builtins without the fields that hold their default; ``graph_from_dict``
    restores them, so ``graph_from_dict(compact_graph_dict(g)) == g``.

    The form a run's RunStarted event records: a 10-node graph of plain nodes takes ~0.7 KB
    instead of ~4.8 KB with every default written out (and that for each run).
    """
    result: dict[str, Any] = _compact(graph)
    return result


#: Each spec class's fields (``msgspec.structs.fields`` evaluates the class's annotations
#: on every call, which cost a fresh graph 4-6 ms to compact).
_FIELDS: dict[type, tuple[msgspec.structs.FieldInfo, ...]] = {}


def _fields(cls: type[msgspec.Struct]) -> tuple[msgspec.structs.FieldInfo, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = msgspec.structs.fields(cls)
    return fields


def _compact(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        out: dict[str, Any] = {}
        config = value.__struct_config__
        if config.tag_field is not None:  # a tagged union's member: keep what tells it apart
            out[config.tag_field] = config.tag
        for field in _fields(type(value)):
            item = getattr(value, field.name)
            if field.default is not msgspec.NODEFAULT:
                if item == field.default:
                    continue
            elif field.default_factory is not msgspec.NODEFAULT:
                if item == field.default_factory():
                    continue
            out[field.encode_name] = _compact(item)
        return out
    if isinstance(value, list):
        return [_compact(item) for item in value]
    return msgspec.to_builtins(value)


def shared_graph_dict(graph: GraphSpec) -> dict[str, Any]:
    """``compact_graph_dict(graph)`` computed once per instance and shared: never mutate it.

    For the RunStarted event of every run of the graph (the conversion costs more than
    the rest of a run's start).
    """
    index = graph._index()
    if index.builtins is None:
        index.builtins = compact_graph_dict(graph)
    return index.builtins


def graph_hash(graph: GraphSpec) -> str:
    """Hex sha256 of the graph's canonical JSON (every field, keys sorted).

    Equal specs hash equal, whatever file format or key order they came from. Computed
    once per instance (every run records it).
    """
    index = graph._index()
    if index.hash is None:
        try:
            canonical = msgspec.json.encode(_as_read_back(graph), order="sorted")
        except (TypeError, msgspec.EncodeError) as exc:
            raise SpecError("", f"graph cannot be encoded as JSON: {exc}") from exc
        index.hash = hashlib.sha256(canonical).hexdigest()
    return index.hash


def _as_read_back(graph: GraphSpec) -> GraphSpec:
    """``graph`` as a file or a run's log gives it back: an int in a float field (``timeout=30``
    in Python) reads back as a float, so the same spec hashes the same whichever it came
    from, and a resumed run finds the hash it recorded. Unchanged if it cannot convert."""
    try:
        return msgspec.convert(msgspec.to_builtins(graph), GraphSpec)
    except (TypeError, msgspec.ValidationError):
        return graph


def function_ref(fn: Callable[..., Any]) -> str:
    """``"module:qualname"`` for a module-level callable, for ``NodeSpec.function``.

    Raises SpecError (path ``function``) for a lambda, a nested function, or anything
    that importing ``module`` and walking ``qualname`` does not give back.
    """
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise SpecError("function", f"{fn!r} has no module and qualified name")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise SpecError(
            "function", f"{module}.{qualname} is a lambda or closure: it cannot be imported"
        )
    ref = f"{module}:{qualname}"
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise SpecError("function", f"{ref} cannot be imported back: {exc}") from exc
    if target is not fn:
        raise SpecError("function", f"importing {ref} does not give back {fn!r}")
    return ref


def retry_delay(policy: RetryPolicy, attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based), jitter included."""
    wait = wait_exponential_jitter(
        multiplier=policy.initial_delay,
        max=policy.max_delay,
        exp_base=policy.multiplier,
        jitter=policy.jitter,
    )
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = attempt
    return float(wait(state))
