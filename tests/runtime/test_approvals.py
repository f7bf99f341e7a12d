"""Only an approval passes a gate, on SQLite and PostgreSQL, through the Python API: a
plain resume leaves a run waiting at its gate, a resume after a cancel waits at the gate
again, an approval is one event naming who and what it carried, a gate lacking input
stays closed, an approval may reject, and one from a runtime that cannot execute the graph
is recorded and left to another."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

from runtime import EdgeSpec, GraphSpec, RunChangedError, RunStateError, Runtime
from runtime.events import ApprovalGranted, ApprovalRejected, RunResumed
from runtime.testing import function_node

pytestmark = pytest.mark.anyio


def _draft(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"reply": f"dear {inputs['customer']}, refunded"}


def _send(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"sent": f"{inputs['reply']} (ok by {inputs['approved_by']})"}


def _apologise(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"sent": "sorry, no refund"}


FUNCTIONS = {"draft": _draft, "send": _send, "apologise": _apologise}

REFUND = GraphSpec(
    id="refund",
    nodes=[
        function_node("draft", input_keys=["customer"], output_keys=["reply"]),
        function_node(
            "send", input_keys=["customer", "reply", "approved_by"], output_keys=["sent"]
        ),
    ],
    edges=[EdgeSpec(source="draft", target="send")],
    entry_node="draft",
    pause_nodes=["send"],
)

WITH_FALLBACK = GraphSpec(
    id="refund_fallback",
    nodes=[*REFUND.nodes, function_node("apologise", output_keys=["sent"])],
    edges=[*REFUND.edges, EdgeSpec(source="send", target="apologise", condition="on_failure")],
    entry_node="draft",
    pause_nodes=["send"],
)


async def _at_gate(rt: Runtime, graph: GraphSpec = REFUND) -> str:
    result = await (await rt.start(graph, input={"customer": "ann"})).result()
    assert (result.status, result.paused_reason, result.resume_at) == ("paused", "hitl", ["send"])
    return result.run_id


async def test_a_resume_leaves_a_run_waiting_at_its_gate(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt)
        before = len(await rt.read_events(run_id))
        with pytest.raises(RunStateError, match="waits for approval at gate 'send'"):
            await rt.resume(run_id, input={"approved_by": "mallory"})
        state = await rt.get_state(run_id)
        assert len(await rt.read_events(run_id)) == before  # nothing recorded
    assert state.status == "paused" and state.paused is not None
    assert (state.paused.reason, state.paused.node_id) == ("hitl", "send")
    assert "sent" not in state.memory


async def test_a_resume_after_a_cancel_at_a_gate_waits_at_the_gate_again(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt)
        await rt.cancel(run_id, reason="later")
        with pytest.raises(RunStateError, match="resume it to wait at the gate again"):
            await rt.approve(run_id, by="ann", input={"approved_by": "ann"})
        result = await (await rt.resume(run_id)).result()
        assert (result.status, result.paused_reason, result.resume_at) == (
            "paused",
            "hitl",
            ["send"],
        )
        assert "sent" not in result.memory
        # The cancel's reason said why the run had stopped; waiting again, it has no error.
        assert result.error is None and (await rt.get_state(run_id)).error is None
        handle = await rt.approve(run_id, by="ann", input={"approved_by": "ann"})
        assert handle is not None
        done = await handle.result()
    assert done.status == "completed"
    assert done.memory["sent"] == "dear ann, refunded (ok by ann)"


async def test_an_approval_is_an_event_naming_who_and_what(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt)
        handle = await rt.approve(run_id, by="bob", input={"approved_by": "bob"})
        assert handle is not None
        result = await handle.result()
        events = await rt.read_events(run_id)
    approvals = [e.body for e in events if isinstance(e.body, ApprovalGranted)]
    assert approvals == [ApprovalGranted(node_id="send", by="bob", input={"approved_by": "bob"})]
    assert result.status == "completed"
    assert result.memory["reply"] == "dear ann, refunded"  # the draft is kept
    # The approval comes right after the pause it answers, then the resumption.
    tags = [e.body.__struct_config__.tag for e in events]
    paused = tags.index("run.paused")
    assert tags[paused + 1 : paused + 3] == ["approval.granted", "run.resumed"]


async def test_a_gate_whose_node_lacks_input_stays_closed_naming_the_keys(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt)
        with pytest.raises(RunStateError, match="its node needs approved_by"):
            await rt.approve(run_id, by="bob")
        state = await rt.get_state(run_id)
    assert state.status == "paused" and state.gate == "send"
    assert "approval.granted" not in state.event_counts


async def test_a_rejection_without_on_failure_cancels_the_run_for_good(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt)
        assert await rt.reject(run_id, by="carol", reason="wrong amount") is None
        state = await rt.get_state(run_id)
        with pytest.raises(RunStateError, match="rejected"):
            await rt.resume(run_id)
        events = await rt.read_events(run_id)
    assert state.status == "cancelled" and state.error == "rejected by carol: wrong amount"
    assert [e.body for e in events if isinstance(e.body, ApprovalRejected)] == [
        ApprovalRejected(node_id="send", by="carol", reason="wrong amount")
    ]
    assert "sent" not in state.memory


async def test_a_rejection_fires_the_gated_nodes_on_failure_edge(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt, WITH_FALLBACK)
        handle = await rt.reject(run_id, by="carol", reason="no")
        assert handle is not None
        result = await handle.result()
    assert result.memory["sent"] == "sorry, no refund"
    assert result.status == "completed" and result.quality == "degraded"


async def test_an_approval_from_a_runtime_that_cannot_execute_is_left_to_another(
    store: str,
) -> None:
    async with Runtime(store, functions=FUNCTIONS) as owner:
        run_id = await _at_gate(owner)
    async with Runtime(store) as bare:  # no functions: it cannot run the graph
        assert await bare.approve(run_id, by="dan", input={"approved_by": "dan"}) is None
        state = await bare.get_state(run_id)
        assert state.status == "running" and state.approved == ["send"]
    async with Runtime(store, functions=FUNCTIONS) as owner:
        result = await (await owner.resume(run_id)).result()
        events = await owner.read_events(run_id)
    assert result.status == "completed"
    assert result.memory["sent"] == "dear ann, refunded (ok by dan)"
    assert sum(isinstance(e.body, RunResumed) for e in events) == 1


async def test_an_approval_racing_a_cancel_never_undoes_it(store: str) -> None:
    """50 approve + cancel pairs from two runtimes on one store: the approval is one
    append at the pause's seq, so whichever lands first wins and the other is refused
    (or, after an approval, the cancel stops the running run): a cancelled run is never
    resumed by the approval, and no run is left claimed."""
    async with (
        Runtime(store, functions=FUNCTIONS) as approver,
        Runtime(store, functions=FUNCTIONS) as canceller,
    ):
        ids = [await _at_gate(approver) for _ in range(50)]
        outcomes: dict[str, str] = {}

        async def approve(run_id: str) -> None:
            try:
                handle = await approver.approve(run_id, by="ann", input={"approved_by": "ann"})
            except RunChangedError as exc:  # says what happened: the cancel won
                assert exc.status == "cancelled", exc
                outcomes[run_id] = "refused"
                return
            assert handle is not None
            outcomes[run_id] = (await handle.result()).status

        async def cancel(run_id: str) -> None:
            with contextlib.suppress(RunStateError):  # it finished or was cancelled first
                await canceller.cancel(run_id, reason="no")

        for run_id in ids:
            async with anyio.create_task_group() as tg:
                tg.start_soon(approve, run_id)
                tg.start_soon(cancel, run_id)
        for run_id in ids:
            with anyio.fail_after(10):
                while (await approver.get_state(run_id)).status == "running":  # noqa: ASYNC110
                    await anyio.sleep(0.01)  # a cancel from elsewhere reaches the owner
        states = {run_id: await approver.get_state(run_id) for run_id in ids}
        logs = {run_id: await approver.read_events(run_id) for run_id in ids}
    async with Runtime(store) as reader:
        assert reader.store is not None
        for run_id in ids:
            info = await reader.store.get_run(run_id)
            assert info is not None and info.owner is None  # no claim left behind
    for run_id in ids:
        tags = [e.body.__struct_config__.tag for e in logs[run_id]]
        after = tags[tags.index("run.paused") + 1 :]
        assert states[run_id].status in ("cancelled", "completed"), (run_id, tags)
        if after[0] == "run.cancelled":  # the cancel won: the approval was refused
            assert outcomes[run_id] == "refused" and after == ["run.cancelled"]
        elif after[:2] == ["approval.granted", "run.cancelled"]:  # cancelled once approved
            # Not resumed after it: the approver heard so, or that its run was cancelled.
            assert outcomes[run_id] in ("refused", "cancelled") and len(after) == 2
        else:  # the approval won: the cancel acted on the run it resumed, or came late
            assert after[:2] == ["approval.granted", "run.resumed"], tags
            assert outcomes[run_id] == states[run_id].status


async def test_who_and_why_that_a_log_could_not_read_back_are_refused_first(store: str) -> None:
    async with Runtime(store, functions=FUNCTIONS) as rt:
        run_id = await _at_gate(rt)
        before = await rt.read_events(run_id)
        bad: list[tuple[Any, type[Exception]]] = [
            (rt.approve(run_id, by=None), TypeError),  # type: ignore[arg-type]
            (rt.approve(run_id, by="   "), ValueError),
            (rt.approve(run_id, by="\ud800"), ValueError),
            (rt.reject(run_id, by="ann", reason=None), TypeError),  # type: ignore[arg-type]
            (rt.cancel(run_id, reason=123), TypeError),  # type: ignore[arg-type]
        ]
        for call, error in bad:
            with pytest.raises(error):
                await call
        assert await rt.read_events(run_id) == before  # nothing recorded, all of it readable
        handle = await rt.approve(run_id, by="ann", input={"approved_by": "ann"})
        assert handle is not None and (await handle.result()).status == "completed"
