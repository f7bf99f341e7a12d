"""One attempt of an LLM node: call the model, run its tool calls, let the judge rule, repeat.

Record before act, in at most two commits per turn: the turn is committed as an
``LlmTurn`` before its tool calls run (with what the model was shown since the last
commit: the visit's opening messages, a compaction); its tool results and outputs
(``ToolResult``, ``OutputSet``), the verdict and the feedback it injects are committed as
one batch before the node acts on the verdict (the next model call, or its ``NodeDone``).
A crash between the two loses only tool results, and the rerun runs those calls again.
Every attempt starts from the node's visit in the run log's live state
(:func:`._history.history_of`), so after a crash the node runs the missing tool calls of
its last turn, judges that turn if it was not judged, and asks the model only for new
turns. Stop reasons follow ``complete_uncut`` and ``refusal``, as parallel branches do.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from actors import ActorSystem
from eventstore import EventBody

from .._errors import ProviderError, TruncatedError
from ..engine._messages import ExecuteNode, NodeDone
from ..engine._runlog import RunLog
from ..events._catalogue import (
    ConversationCompacted,
    LlmTurn,
    MessageAdded,
    OutputSet,
    PaidUsage,
    StallDetected,
    ToolCallRecord,
    ToolResult,
    Verdict,
)
from ..events._conversation import entry_of, summary_entry
from ..events._tokens import spent, usage_fields
from ..providers._base import LlmProvider, LlmRequest, LlmResponse, complete_uncut, refusal
from ..spec._model import GraphSpec, NodeSpec
from ._history import NodeHistory
from ._judge import ImplicitJudge
from ._judge_actor import JudgeClient
from ._meter import Meter, MeteredProvider
from ._parallel import BranchRunner, RoundFailed
from ._prompt import (
    ChatView,
    build_system_prompt,
    conversation_summary,
    plan_compaction,
    transition_marker,
)
from ._stall import StallDetector, signature
from ._support import SET_OUTPUT, apply_set_output, listing, set_output_spec
from ._tool_calls import recorded_calls
from ._tools import ToolRegistry, run_tool_calls
from ._verdict import (
    DEFAULT_RETRY_FEEDBACK,
    JudgeProtocol,
    JudgeVerdict,
    feedback_message,
    judge_context,
    max_iterations_verdict,
    missing_required_keys,
    should_judge,
    stall_verdict,
    waits_for_user,
)

__all__ = ["TurnLoop", "node_failure"]


def node_failure(
    message: ExecuteNode, error: str, error_type: str, usage: PaidUsage | None = None
) -> NodeDone:
    """A failed attempt that the executor does not retry (retry is the judge's job), with
    the tokens it paid for that no other event records."""
    return message.failed(error, error_type, retryable=False, usage=usage)


class TurnLoop:
    """One attempt of an LLM node: its turn loop, whose state starts as the rebuilt history.

    ``budget_tokens`` is the estimated conversation size above which older turns are
    compacted; ``judge_timeout`` bounds each verdict (seconds); ``tool_timeout`` bounds
    each tool call (None: no limit); ``branch_runner`` runs each turn as parallel
    branches; ``system`` spawns the attempt's judge actor.
    """

    def __init__(
        self,
        *,
        spec: NodeSpec,
        log: RunLog,
        system: ActorSystem,
        message: ExecuteNode,
        graph: GraphSpec | None,
        history: NodeHistory,
        judge: JudgeProtocol | None,
        registry: ToolRegistry,
        provider: LlmProvider,
        budget_tokens: int,
        judge_timeout: float,
        tool_timeout: float | None,
        branch_runner: BranchRunner | None,
    ) -> None:
        self.spec = spec
        self.node_id = spec.id
        self.log = log
        self.message = message
        self.graph = graph
        self.history = history
        self.judge = judge
        implicit = ImplicitJudge(provider, fail_closed=spec.judge_fail_closed)
        self.judge_client = JudgeClient(system, implicit, judge, timeout=judge_timeout)
        self.tool_timeout = tool_timeout
        self.branch_runner = branch_runner
        self.registry = registry
        self.provider = provider
        self.budget = budget_tokens
        self.chat = ChatView(history.entries)
        self.iteration = history.iteration
        turns = history.turn_calls
        if history.last_turn is not None and history.last_verdict is None and turns:
            turns = turns[:-1]  # the last turn is judged again below, which observes it
        self.stall = StallDetector.from_history(turns, threshold=spec.stall_threshold)
        self.tool_specs = registry.specs()
        if spec.output_keys:
            self.tool_specs.append(set_output_spec(spec.output_keys, spec.nullable_keys))
        self.system = build_system_prompt(
            identity=graph.identity if graph else "",
            narrative=graph.narrative if graph else "",
            goal=graph.goal if graph else None,
            focus=spec.system_prompt,
            node_description=spec.description,
            output_keys=spec.output_keys,
            nullable_keys=spec.nullable_keys,
        )

    @property
    def accumulator(self) -> dict[str, Any]:
        """The node's outputs so far in this visit: the run state's (read, never changed)."""
        return self.log.state.outputs.get(self.node_id) or {}

    # ------------------------------------------------------------------ the loop

    async def run(self) -> NodeDone:
        history = self.history
        last = history.last_turn
        if history.ended is not None:  # recorded before a crash, not yet failed
            return node_failure(self.message, *history.ended)
        if last is not None and history.missing_calls:
            # First, so the results follow the turn that asked for them.
            await self._run_tools(history.missing_calls)
        await self._open()
        if last is not None:
            verdict = history.last_verdict
            if verdict is None:
                done = await self._judge(last)
                if done is not None:
                    return done
            elif verdict.action in ("accept", "escalate"):
                return self._done(verdict.action, verdict.feedback)
            elif (
                waits_for_user(self.spec.client_facing, verdict, last)
                and not history.answered_since_verdict
            ):
                return self._needs_input()
        while True:
            # A model, tools and a log that all answer without suspending (a scripted
            # model, set_output, the in-memory log, shielded commits) must not keep a
            # cancellation, or the rest of the event loop, waiting.
            await anyio.lowlevel.checkpoint()
            if self.iteration >= self.spec.max_iterations:
                # Only reachable on a rerun whose last turn was already at the bound.
                verdict_mi = max_iterations_verdict(
                    self.iteration, self.spec.max_iterations, missing_keys=self._missing()
                )
                assert verdict_mi is not None
                await self.log.append([self._verdict_event(verdict_mi)])
                return self._done(verdict_mi.action, verdict_mi.feedback)
            await self._maybe_compact()
            request = LlmRequest(
                messages=list(self.chat.messages),
                system=self.system,
                tools=self.tool_specs,
                model=self.spec.model,
                purpose="turn",
            )
            if self.branch_runner is not None:
                done = await self._parallel_round(request)
                if done is not None:
                    return done
                continue
            started = time.perf_counter()
            cut: ProviderError | None = None
            meter = Meter()  # each call's tokens as it returns: a failed one's too
            try:
                response = await complete_uncut(MeteredProvider(self.provider, meter), request)
            except ProviderError as exc:
                paid = exc.response if isinstance(exc, TruncatedError) else None
                if not isinstance(paid, LlmResponse):  # no turn (a provider's own cut neither):
                    usage = spent(meter.usage, "turn")  # an unreadable answer's cost, if any
                    return node_failure(self.message, str(exc), type(exc).__name__, usage)
                response, cut = paid, exc
            latency = response.latency_ms or (time.perf_counter() - started) * 1000.0
            self.iteration += 1
            calls, refused = recorded_calls(response.tool_calls)
            turn = LlmTurn(
                node_id=self.node_id,
                iteration=self.iteration,
                text=response.text,
                tool_calls=calls,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                latency_ms=latency,
                model=response.model,
                stop=response.stop,
                input_cached=response.usage.input_cached,
                input_cache_write=response.usage.input_cache_write,
            )
            ended = None if cut is None else (str(cut), "TruncatedError")
            if (refused_turn := refusal(response.stop, response.text)) is not None:
                ended = (refused_turn, "Refused")
            if ended is not None:
                # A fact of the run (its tokens were paid for), and no answer.
                await self._record([turn])
                return node_failure(self.message, *ended)
            # A refused call is answered with the turn, so no resume ever runs it.
            await self._record(
                [turn, *(self._refused(c, refused) for c in calls if c.id in refused)]
            )
            runnable = [call for call in calls if call.id not in refused]
            if runnable:
                await self._run_tools(runnable)
            done = await self._judge(turn)
            if done is not None:
                return done

    # ------------------------------------------------------------------ steps

    async def _open(self) -> None:
        """Record what the model must see before its first turn of this visit."""
        history = self.history
        bodies: list[EventBody] = []
        if not history.opened:
            continuous = self.graph is None or self.graph.conversation_mode == "continuous"
            if continuous and history.previous_node is not None:
                marker = transition_marker(
                    from_node=history.previous_node,
                    outputs=history.previous_outputs,
                    to_node=self.node_id,
                    to_description=self.spec.description,
                )
                bodies.append(self._message(marker, "transition"))
            inputs = self.message.inputs
            if inputs:
                bodies.append(self._message(listing("[Inputs]", inputs), "inputs"))
            elif not bodies and not self.chat.entries:
                bodies.append(self._message("Begin the task.", "inputs"))
        if history.pending_input:
            bodies.append(self._message(listing("[User input]", history.pending_input), "input"))
            self.stall.reset()
            history.answered_since_verdict = True
        await self._record(bodies, durable=False)  # rides with the first turn

    async def _run_tools(self, calls: Sequence[ToolCallRecord]) -> None:
        """Run the calls (set_output inline, the rest through the registry); record results."""
        tool_calls = list(calls)
        others = [c for c in tool_calls if c.name != SET_OUTPUT]
        results = await run_tool_calls(self.registry, others, timeout=self.tool_timeout)
        ran = {id(c): (text, err) for c, text, err in results}
        bodies: list[EventBody] = []
        outputs: list[EventBody] = []
        for call in tool_calls:
            if call.name == SET_OUTPUT:
                text, is_error, assignment = apply_set_output(call, self.spec.output_keys)
                if assignment is not None:
                    key, value = assignment
                    outputs.append(OutputSet(node_id=self.node_id, key=key, value=value))
            else:
                text, is_error = ran[id(call)]
            bodies.append(
                ToolResult(
                    node_id=self.node_id,
                    call_id=call.id,
                    name=call.name,
                    content=text,
                    is_error=is_error,
                )
            )
        # Committed with the verdict on this turn (or before the next model call).
        await self._record([*bodies, *outputs], durable=False)

    async def _judge(self, turn: LlmTurn) -> NodeDone | None:
        """Rule on ``turn``: stall check, judge, max_iterations; record; maybe finish."""
        spec = self.spec
        calls = turn.tool_calls
        bodies: list[EventBody] = []
        verdict: JudgeVerdict
        if self.stall.observe(calls):
            bodies.append(
                StallDetected(
                    node_id=self.node_id, iteration=turn.iteration, signature=signature(calls)
                )
            )
            verdict = stall_verdict(spec.stall_threshold, spec.client_facing)
        elif should_judge(turn.iteration, spec.judge_every_n_turns, bool(calls)):
            messages = self.chat.messages
            context = judge_context(
                node_id=self.node_id,
                iteration=turn.iteration,
                accumulator=dict(self.accumulator),
                expected_keys=spec.output_keys,
                nullable_keys=spec.nullable_keys,
                turn_had_tool_calls=bool(calls),
                node_description=spec.description,
                success_criteria=spec.success_criteria,
                client_facing=spec.client_facing,
                conversation_summary=conversation_summary(messages) if self.judge else "",
                messages=messages,
            )
            verdict = await self.judge_client.ask(context)
        else:  # a tool turn the judge is not asked about: its bail-out, as the cascade's
            verdict = JudgeVerdict(action="retry", level="bail_out")
        if verdict.action == "retry":
            final = max_iterations_verdict(
                turn.iteration, spec.max_iterations, missing_keys=self._missing()
            )
            if final is not None:
                # The bound ends the node whatever was ruled, but the RETRY it overrules is
                # a fact of the turn (and what a replay serves the judge): recorded.
                bodies.append(self._verdict_event(verdict, iteration=turn.iteration))
                overruled = f" It overrules the {verdict.level} RETRY of this turn."
                verdict = msgspec.structs.replace(final, feedback=final.feedback + overruled)
        ask_user = waits_for_user(self.spec.client_facing, verdict, turn)
        if verdict.action == "retry" and not verdict.feedback and not calls and not ask_user:
            # Asking again with an unchanged conversation would get the same answer.
            verdict = msgspec.structs.replace(verdict, feedback=DEFAULT_RETRY_FEEDBACK)
        bodies.append(self._verdict_event(verdict, iteration=turn.iteration))
        if verdict.action == "retry" and verdict.feedback and not ask_user:
            kind = "stall_warning" if verdict.level == "stall" else "feedback"
            bodies.append(self._message(feedback_message(verdict), kind))
        await self._record(bodies)
        if verdict.action == "retry":
            return self._needs_input() if ask_user else None
        return self._done(verdict.action, verdict.feedback)

    async def _parallel_round(self, request: LlmRequest) -> NodeDone | None:
        """One round of parallel branches in place of one model call: the winner's
        messages become this node's (recorded in one batch), then the judge rules on its
        final turn as on any turn."""
        runner = self.branch_runner
        assert runner is not None
        try:
            bodies = await runner.round(
                request,
                node=self.spec,
                visit=self.message.visit,
                iteration=self.iteration,
                log=self.log,
                registry=self.registry,
                graph=self.graph,
                tool_timeout=self.tool_timeout,
            )
        except RoundFailed as exc:
            return node_failure(self.message, str(exc), "BranchesFailed")
        await self._record(bodies)
        final = [body for body in bodies if isinstance(body, LlmTurn)][-1]
        self.iteration = final.iteration
        return await self._judge(final)

    def stop_judge(self) -> None:
        """Stop this attempt's judge actor, if it runs."""
        self.judge_client.stop()

    async def unruled(self) -> PaidUsage | None:
        """The tokens of the judge's calls on a turn this attempt's ``timeout`` left with
        no recorded verdict (see ``JudgeClient.unruled``)."""
        visit = self.log.state.visits.get(self.node_id)
        return await self.judge_client.unruled(visit, self.message.visit)

    async def _maybe_compact(self) -> None:
        """Compact older messages when over budget; recorded with the next turn."""
        if self.chat.tokens <= self.budget:
            return
        continuous = self.graph is None or self.graph.conversation_mode == "continuous"
        if continuous and self.message.branch is not None:
            # Inside parallel branches the history before the fork is shared with the
            # sibling branches: it is not this node's to replace.
            return
        plan = plan_compaction(self.chat.messages, budget_tokens=self.budget)
        if plan is None:
            return
        upto, summary = plan
        upto_entries = self.chat.compact(upto, summary_entry(self.node_id, summary))
        compacted = ConversationCompacted(node_id=self.node_id, upto=upto_entries, summary=summary)
        await self.log.append([compacted], durable=False)

    # ------------------------------------------------------------------ helpers

    async def _record(self, bodies: list[EventBody], *, durable: bool = True) -> None:
        """Append ``bodies`` to the log (``durable=False``: with the next commit) and show
        their conversation entries to the model from now on."""
        if not bodies:
            return
        await self.log.append(bodies, durable=durable)
        for body in bodies:
            if isinstance(body, LlmTurn | ToolResult | MessageAdded):
                self.chat.append(entry_of(body))

    def _refused(self, call: ToolCallRecord, refused: Mapping[str, str]) -> ToolResult:
        return ToolResult(
            node_id=self.node_id,
            call_id=call.id,
            name=call.name,
            content=refused[call.id],
            is_error=True,
        )

    def _message(self, content: str, kind: str) -> MessageAdded:
        return MessageAdded(node_id=self.node_id, role="user", content=content, kind=kind)

    def _verdict_event(self, verdict: JudgeVerdict, *, iteration: int | None = None) -> Verdict:
        return Verdict(
            node_id=self.node_id,
            iteration=self.iteration if iteration is None else iteration,
            action=verdict.action,
            level=verdict.level,
            feedback=verdict.feedback,
            confidence=verdict.confidence,
            error=verdict.error,
            **usage_fields(verdict.usage),
        )

    def _missing(self) -> list[str]:
        return missing_required_keys(
            self.accumulator, self.spec.output_keys, self.spec.nullable_keys
        )

    def _done(self, action: str, feedback: str) -> NodeDone:
        if action == "accept":
            return self.message.succeeded(dict(self.accumulator))
        return node_failure(self.message, feedback or "the judge escalated", "Escalated")

    def _needs_input(self) -> NodeDone:
        return self.message.failed(
            "waiting for user input", "NeedsInput", retryable=False, needs_input=True
        )
