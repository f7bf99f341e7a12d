"""The JSON shapes of the HTTP API: request bodies (validated with msgspec) and the answers
that are the API's own; what it shows of runs is the read model's (:mod:`runtime.reads`).

Every shape here is a msgspec Struct, so the same classes decode requests, encode responses
and produce the OpenAPI description's schemas (``msgspec.json.schema_components``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "ApiError",
    "ApproveRequest",
    "CancelRequest",
    "ForkRequest",
    "GraphInfo",
    "GraphList",
    "RejectRequest",
    "ReplayRequest",
    "ResumeRequest",
    "RunRef",
    "StartRequest",
    "VerifyView",
]

# \Z, not $ (which also matches before a final newline); ids of dots only are refused by
# check_run_id, which start_run calls.
#: Who approves or rejects: a name (Runtime.approve refuses one of spaces only too).
_By = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"\S")]
_RunId = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+\Z")]


class _Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of request bodies: unknown fields are refused, so a typo is a 422, not a no-op."""


class StartRequest(_Body, frozen=True):
    """Start a run of the registered graph ``graph`` with ``input`` as its initial memory:
    ``execute`` says where it runs, ``server`` (this process) or ``workers`` (recorded for
    ``magistrate worker`` processes on the same store, nothing of it run here)."""

    graph: Annotated[str, msgspec.Meta(min_length=1)]
    input: dict[str, Any] = {}
    run_id: _RunId | None = None
    execute: Literal["server", "workers"] = "server"


class ResumeRequest(_Body, frozen=True):
    """Resume a paused, cancelled or crashed run; ``input`` is injected first."""

    input: dict[str, Any] = {}


#: The run's last seq as the one deciding saw it: a run whose log moved on since (a
#: cancel, a resume with input) is refused with 409, nothing recorded.
_Seen = Annotated[int, msgspec.Meta(ge=1, le=2**53)] | None


class ApproveRequest(_Body, frozen=True):
    """Approve the gate a paused run waits at: ``by`` names who (required), ``input`` goes
    into memory (only the keys given: nothing else is written); ``expected_seq``, the run's
    last seq as the approver saw it, refuses (409) a run that moved on since."""

    by: _By
    input: dict[str, Any] = {}
    expected_seq: _Seen = None


class RejectRequest(_Body, frozen=True):
    """Reject the gate a paused run waits at (final): ``by`` names who, ``reason`` why;
    ``expected_seq`` as for an approval."""

    by: _By
    reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    expected_seq: _Seen = None


class CancelRequest(_Body, frozen=True):
    reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class ForkRequest(_Body, frozen=True):
    """Start a new run whose log is a copy of the first ``at_seq`` events of this one."""

    at_seq: Annotated[int, msgspec.Meta(ge=1, le=2**53)]
    input: dict[str, Any] = {}


class ReplayRequest(_Body, frozen=True):
    """Replay the run against the registered graph ``graph`` (None: the graph it recorded);
    ``rejudge`` asks the judges again with the server's models (it costs tokens). Function
    nodes are always served from the log: a request never runs an application's code."""

    graph: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    rejudge: bool = False


class ApiError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Every error answer: ``error`` is a stable code, ``detail`` a sentence for people;
    ``run_id`` and ``status`` only when a run is concerned (absent, never null)."""

    error: str
    detail: str
    run_id: str | None = None
    status: str | None = None


class RunRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A run a request started or acted on, and what happened to it (``detail``: what
    follows, for a gate's decision)."""

    run_id: str
    action: str
    detail: str = ""


class VerifyView(msgspec.Struct, frozen=True, kw_only=True):
    """The hash chain check: ``ok`` with ``checked`` events, or where it first breaks."""

    run_id: str
    ok: bool
    checked: int
    broken_at: int | None
    reason: str | None


class GraphInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A graph the server can start: its name and its spec as builtins."""

    name: str
    graph_hash: str
    spec: dict[str, Any]


class GraphList(msgspec.Struct, frozen=True, kw_only=True):
    graphs: list[GraphInfo]


RunStatusFilter = Literal["new", "running", "paused", "cancelled", "completed", "failed"]
QualityFilter = Literal["clean", "degraded", "failed"]
