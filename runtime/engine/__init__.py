"""The engine: the executor actor that walks a graph, edges, the run log, node actors.

Internal: embedders drive it through :class:`runtime.Runtime`. :class:`NodeContext`, the
context a function node may take, is on :mod:`runtime`.
"""

from ._function_node import NodeContext

__all__ = ["NodeContext"]
