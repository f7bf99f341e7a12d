"""A node waiting for its own run's end would wait forever: the run ends only after the
node returns. :data:`NODE_OF_RUN` names the run whose node runs in the current context;
:func:`check_not_own_run` refuses such a wait at once. The rule is here, once; the waits
call it (``RunHandle.result``, ``Runtime.result``, ``RunHandle.events``, see
``_watch.follow_run``) and the nodes set the variable:

- a function node's lane sets it once in the context every attempt's task copies
  (``engine/_function_node.py``); a plain ``def`` runs in a worker thread with a copy of
  that context (``_threads.py``), and what it hands back to the loop
  (``anyio.from_thread.run`` with the loop's token, ``asyncio.run_coroutine_threadsafe``,
  a blocking portal's ``call``) runs in a copy of the thread's: refused alike;
- an LLM node sets it for each attempt (:func:`node_of`, ``llm/_node.py``): its tools,
  sync ones in worker threads too, and its parallel branches' tools run in it.

A run a node starts is launched with it unset (``_launch.py``): its tasks, which copy the
context they are made in, are not the node's run's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .._errors import RunStateError

__all__ = ["NODE_OF_RUN", "check_not_own_run", "node_of"]

#: The run whose node runs in this context (None: no node's).
NODE_OF_RUN: ContextVar[str | None] = ContextVar("magistrate_node_of_run", default=None)


def check_not_own_run(
    run_id: str, instead: str = "return instead, or wait for another run"
) -> None:
    """Raise RunStateError if a node of ``run_id`` runs in this context: it would wait
    for its own run's end, which comes only after it returns. ``instead``: what to do."""
    if NODE_OF_RUN.get() == run_id:
        raise RunStateError(
            run_id,
            "running",
            "a node cannot wait for its own run's end (the run ends only after the node "
            f"returns): {instead}",
        )


@contextmanager
def node_of(run_id: str) -> Iterator[None]:
    """Run the body as a node of ``run_id`` (a node's attempt, in its own task)."""
    token = NODE_OF_RUN.set(run_id)
    try:
        yield
    finally:
        NODE_OF_RUN.reset(token)
