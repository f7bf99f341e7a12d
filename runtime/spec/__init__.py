"""Graph specs: the model, loading and checking graph files, expressions, import policy.

Everything a graph *is*, before anything runs: :class:`GraphSpec` and its parts, the
loaders for YAML, TOML, JSON and dicts, :func:`validate_graph`, :func:`read_data` (other
data read by the rules graph files are read by), the safe expression language of
conditional edges and expression verifiers, and a graph as Mermaid.
The most used names are on :mod:`runtime` as well.
"""

from ._expr import Expression, compile_expression
from ._goal import Constraint, ConstraintOutcome, CriterionOutcome, GoalOutcome, SuccessCriterion
from ._imports import import_allowed
from ._load import graph_from_dict, load_graph, parse_graph
from ._mermaid import graph_to_mermaid
from ._model import (
    EdgeCondition,
    EdgeSpec,
    Goal,
    GraphSpec,
    MemoryKey,
    NodeKind,
    NodeSpec,
    RetryPolicy,
    compact_graph_dict,
    function_ref,
    graph_hash,
    graph_to_dict,
)
from ._parallel import BranchCandidate, BranchJudgeSpec, BranchSpec, BranchStrategy, ParallelSpec
from ._parse import read_data
from ._validate import validate_graph
from ._verifier import (
    ExpressionVerifier,
    JsonPathAssertion,
    JsonPathVerifier,
    LlmJudgeVerifier,
    VerificationResult,
    VerifierSpec,
)

__all__ = [  # noqa: RUF022 (grouped by topic, not sorted)
    # the model
    "GraphSpec",
    "NodeSpec",
    "EdgeSpec",
    "Goal",
    "MemoryKey",
    "RetryPolicy",
    "NodeKind",
    "EdgeCondition",
    # goals
    "Constraint",
    "ConstraintOutcome",
    "CriterionOutcome",
    "GoalOutcome",
    "SuccessCriterion",
    # parallel branches
    "BranchCandidate",
    "BranchJudgeSpec",
    "BranchSpec",
    "BranchStrategy",
    "ParallelSpec",
    # verifiers
    "VerifierSpec",
    "ExpressionVerifier",
    "JsonPathAssertion",
    "JsonPathVerifier",
    "LlmJudgeVerifier",
    "VerificationResult",
    # loading, checking, showing
    "load_graph",
    "parse_graph",
    "graph_from_dict",
    "validate_graph",
    "graph_to_dict",
    "compact_graph_dict",
    "graph_hash",
    "function_ref",
    "import_allowed",
    "graph_to_mermaid",
    "read_data",
    # expressions
    "Expression",
    "compile_expression",
]
