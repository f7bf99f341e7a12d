"""A node waiting for its own run's end would wait forever: the run ends only after the
node returns. :data:`NODE_OF_RUN` names the run whose function node runs in the current
context (set once in each lane's context, which every attempt's task copies: nothing a
step); :func:`check_not_own_run` refuses such a wait at once (``RunHandle.result``,
``Runtime.result``). A run a node starts is launched with it unset (``_launch.py``): its
tasks, which copy the context they are made in, are not the node's run's."""

from __future__ import annotations

from contextvars import ContextVar

from .._errors import RunStateError

__all__ = ["NODE_OF_RUN", "check_not_own_run"]

#: The run whose function node runs in this context (None: no node's).
NODE_OF_RUN: ContextVar[str | None] = ContextVar("magistrate_node_of_run", default=None)


def check_not_own_run(run_id: str) -> None:
    """Raise RunStateError if a node of ``run_id`` runs in this context: it would wait
    for its own run's end, which comes only after it returns."""
    if NODE_OF_RUN.get() == run_id:
        raise RunStateError(
            run_id,
            "running",
            "a node cannot wait for its own run's end (the run ends only after the node "
            "returns): return instead, or wait for another run",
        )
