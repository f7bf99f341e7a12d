"""Graph structures compiled once per graph hash, not once per ``GraphSpec`` instance.

Compiling a graph has two steps. The structure (validated, nodes and edges indexed, the
compact form a run's ``run.started`` records) depends only on the spec's content, so it
is kept here by graph hash: an app that builds an equal spec for every request pays for
the hash (one sorted JSON encoding and a SHA-256), not for validation again. Binding the
callables the nodes name is the second step, done only by a runtime that executes the
graph (``runtime._node_factory``), so reads and checks of stored graphs need no code.

The memo is bounded (:data:`KEEP` structures, the oldest dropped first) and holds only
frozen, derived data: deleting it changes nothing but speed.
"""

from __future__ import annotations

from .._errors import SpecError
from ._model import GraphSpec, _Index, graph_hash, shared_graph_dict

__all__ = ["KEEP", "adopt_compiled", "remember_compiled"]

#: How many validated graph structures are kept.
KEEP = 256

_BY_HASH: dict[str, _Index] = {}


def adopt_compiled(graph: GraphSpec) -> bool:
    """Give ``graph`` the validated structure of an equal spec seen before, if any."""
    if not _BY_HASH:
        return False
    try:
        known = _BY_HASH.get(graph_hash(graph))
    except SpecError:  # not encodable: validation says why
        return False
    if known is None:
        return False
    graph._adopt(known)
    return True


def remember_compiled(graph: GraphSpec) -> None:
    """Keep the structure of ``graph``, just found valid, for equal specs to come."""
    try:
        key = graph_hash(graph)
    except SpecError:
        return
    shared_graph_dict(graph)  # the compact form, computed once for every equal spec
    if key not in _BY_HASH and len(_BY_HASH) >= KEEP:
        del _BY_HASH[next(iter(_BY_HASH))]
    _BY_HASH[key] = graph._index()
