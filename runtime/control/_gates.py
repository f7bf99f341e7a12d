"""Where a run stands at its gates, as its state says: the gate it waits at (what an
approval or a rejection answers), whether a plain resume may continue it, and what the
gated node would still lack. See :mod:`runtime.control._approvals` for the rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import RunChangedError, RunStateError
from ..events._state import RunState
from ..spec._model import GraphSpec

__all__ = ["check_resumable", "gate_of", "missing_keys"]


def gate_of(run_id: str, state: RunState) -> str:
    """The pause node ``run_id`` waits at (what an approval or a rejection answers); raises
    RunStateError, with what to do instead, when it waits at no gate (RunChangedError for
    a run already cancelled or finished)."""
    paused = state.paused
    if state.status == "paused" and paused is not None and paused.reason == "hitl":
        if paused.node_id is not None:
            return paused.node_id
    if state.status == "cancelled" and state.gate is not None:
        reason = f"it was cancelled at gate {state.gate!r}: resume it to wait at the gate again"
        raise RunChangedError(run_id, state.status, reason)
    if state.status in ("cancelled", "completed", "failed"):
        raise RunChangedError(run_id, state.status, "it waits at no gate")
    if state.status == "paused":
        why = paused.reason if paused is not None else "user"
        reason = f"it paused ({why}), not at a gate: resume it instead"
    else:
        reason = "it waits at no gate"
    raise RunStateError(run_id, state.status, reason)


def check_resumable(run_id: str, state: RunState) -> None:
    """A plain resume never passes a gate: raises RunStateError for a run waiting at one,
    and for a run cancelled by a rejection (a rejection is final)."""
    paused = state.paused
    if state.status == "paused" and paused is not None and paused.reason == "hitl":
        raise RunStateError(
            run_id,
            "paused",
            f"it waits for approval at gate {paused.node_id!r}: approve or reject it "
            "(only an approval passes a gate)",
        )
    if state.status == "cancelled" and state.cancelled_at in state.rejected:
        raise RunStateError(
            run_id, "cancelled", f"its approval at {state.cancelled_at!r} was rejected (final)"
        )


def missing_keys(
    graph: GraphSpec, node_id: str, state: RunState, input: Mapping[str, Any]
) -> list[str]:
    """The input keys of the gated node that neither memory nor the approval's input holds."""
    spec = graph.node_map().get(node_id)
    if spec is None:
        return []
    return [k for k in spec.input_keys if k not in state.memory and k not in input]
