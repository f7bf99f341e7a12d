"""Replay a recorded run against today's graph: what would change, without calling a
model or a tool. :meth:`runtime.Runtime.replay` returns a :class:`ReplayReport`."""

from ._report import Divergence, ReplayReport

__all__ = ["Divergence", "ReplayReport"]
