"""The LLM event-loop node: call the model, run its tool calls, let the judge rule, repeat.

One :class:`LlmNodeActor` per LLM node of a run. For each ``ExecuteNode`` it runs one
attempt (the executor never retries LLM nodes: retry is the judge's job) and tells the
executor ``NodeDone``:

- ACCEPT: success, with the output accumulator as outputs (the executor writes them to
  memory); ESCALATE (or max_iterations with required keys missing): failure with
  ``error_type="Escalated"``, never retryable, so on_failure edges apply; a provider
  error that survived the provider's own retries: failure, never retryable, recording
  what the failed call cost when it was paid for (an answer that could not be read);
- past the node's ``timeout``: failure (``NodeTimeoutError``), recording the tokens of
  its judge's calls on a turn whose verdict the log does not hold;
- a client-facing node that stalls asks for user input (``needs_input``): the run
  pauses with reason "input", and a resume reruns the node, which shows the model the
  injected data (a ``MessageAdded(kind="input")``) and continues its conversation.

Each attempt is a :class:`._turn_loop.TurnLoop`, which records before it acts (see there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel

from actors import Actor, ActorRef

from .._errors import NodeTimeoutError, SpecError, ToolTimeoutError, UnknownToolError
from ..control._own_run import node_of
from ..engine._messages import ExecuteNode, NodeDone
from ..engine._runlog import RunLog
from ..providers._asked import asked_at
from ..providers._base import LlmProvider
from ..spec._load import graph_from_dict
from ..spec._model import GraphSpec, NodeSpec
from ._history import NodeHistory, history_of
from ._parallel import BranchRunner
from ._support import SET_OUTPUT, resolve_judge
from ._tools import Tool, ToolRegistry
from ._turn_loop import TurnLoop, node_failure
from ._verdict import JudgeProtocol

__all__ = ["LlmNodeActor"]


class LlmNodeActor(Actor):
    """Runs one LLM node of one run: one attempt per ``ExecuteNode`` (see module docs).

    ``tools`` is the runtime's registry: the node offers the tools named in
    ``NodeSpec.tools`` plus ``set_output``. ``judges`` resolves ``NodeSpec.judge``.
    ``context_budget_tokens`` is the estimated size above which older turns are compacted.
    ``judge_timeout`` bounds each verdict (seconds): the node asks its judge, a
    :class:`JudgeActor` it spawns for the attempt, and a judge that raises or does not
    answer in time gets the judge-failure verdict.
    """

    def __init__(
        self,
        spec: NodeSpec,
        executor: ActorRef,
        log: RunLog,
        *,
        provider: LlmProvider | None,
        tools: ToolRegistry | None = None,
        judges: Mapping[str, JudgeProtocol] | None = None,
        context_budget_tokens: int = 60_000,
        judge_timeout: float = 300.0,
        node_timeout: float | None = None,
        tool_timeout: float | None = None,
        branch_runner: BranchRunner | None = None,
    ) -> None:
        #: Runs each turn as parallel branches (``NodeSpec.parallel``; see ``_parallel``).
        self.branch_runner = branch_runner
        self.spec = spec
        self.executor = executor
        self.log = log
        self.provider = provider
        self.tools = tools if tools is not None else ToolRegistry()
        self.judges = dict(judges or {})
        self.context_budget_tokens = context_budget_tokens
        self.judge_timeout = judge_timeout
        # The spec's limits win over the runtime's defaults (None: no limit).
        self.node_timeout = spec.timeout if spec.timeout is not None else node_timeout
        self.tool_timeout = spec.tool_timeout if spec.tool_timeout is not None else tool_timeout
        self._graph: GraphSpec | None = None
        #: The attempt in hand, for its timeout to ask what its judge paid for.
        self._loop: TurnLoop | None = None

    async def receive(self, message: Any) -> Any:
        """Run one attempt and tell the executor its NodeDone.

        Blocks on the log, the model, the tools and the judge. Cancellation (the executor
        stopping the node) abandons the attempt; what was committed stays, so partial
        outputs are flushed by the executor and a resume continues from the log. Store
        errors propagate (the actor stops and the executor records the crash).
        """
        assert isinstance(message, ExecuteNode)
        self._loop = None
        try:
            # A node of its run: its tools waiting for the run's end are refused at once.
            with node_of(self.log.run_id), anyio.move_on_after(self.node_timeout) as deadline:
                done = await self._attempt(message)
        except ToolTimeoutError as exc:  # a failure of the node, as the issue of a timeout
            done = node_failure(message, str(exc), "ToolTimeoutError")
        if deadline.cancelled_caught:
            error = NodeTimeoutError(message.node_id, self.node_timeout or 0.0)
            # The judge's paid calls on a turn it had not ruled on (or whose verdict was
            # not recorded) are recorded with the failure.
            usage = None if self._loop is None else await self._loop.unruled()
            done = node_failure(message, str(error), "NodeTimeoutError", usage)
        self._loop = None  # its conversation is the log's, not kept here
        await self.executor.tell(done)

    async def _attempt(self, message: ExecuteNode) -> NodeDone:
        spec = self.spec
        if self.provider is None:
            return node_failure(message, "no LLM provider is configured for LLM nodes", "SpecError")
        try:
            judge = None
            if spec.judge is not None:
                judge = resolve_judge(spec.judge, self.judges, path=f"node {spec.id}.judge")
            registry = ToolRegistry(self._tool(name) for name in spec.tools if name != SET_OUTPUT)
        except (SpecError, UnknownToolError) as exc:
            return node_failure(message, str(exc), type(exc).__name__)
        history = history_of(self.log.state, spec.id, message.visit)
        graph = self._graph_of(history)
        loop = self._loop = TurnLoop(
            spec=spec,
            log=self.log,
            system=self.system,
            message=message,
            graph=graph,
            history=history,
            judge=judge,
            registry=registry,
            provider=self.provider,
            budget_tokens=self.context_budget_tokens,
            judge_timeout=self.judge_timeout,
            tool_timeout=self.tool_timeout,
            branch_runner=self.branch_runner,
        )
        try:
            with asked_at(spec.id, visit=message.visit):  # where its model turns are asked
                return await loop.run()
        finally:
            loop.stop_judge()

    def _tool(self, name: str) -> Tool:
        return self.tools.get(name)

    def _graph_of(self, history: NodeHistory) -> GraphSpec | None:
        if self._graph is None and history.graph is not None:
            self._graph = graph_from_dict(history.graph, validate=False)
        return self._graph
