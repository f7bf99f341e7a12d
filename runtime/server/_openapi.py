"""The OpenAPI 3.1 description of the HTTP API, built from the msgspec shapes it uses."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import ReplayReport
from ..reads import ChainStatus, EventPage, RunDetail, RunList
from ._schemas import (
    ApiError,
    ApproveRequest,
    CancelRequest,
    ForkRequest,
    GraphList,
    RejectRequest,
    ReplayRequest,
    ResumeRequest,
    RunRef,
    StartRequest,
    VerifyView,
)

__all__ = ["MAX_INT", "openapi_document"]

_REF = "#/components/schemas/{name}"
#: The largest seq, offset or position a query may name (SQLite integers are 64-bit).
MAX_INT = 2**53
_STATUSES = ["new", "running", "paused", "cancelled", "completed", "failed"]


def _json(name: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(name=name)}}},
    }


def _errors(*codes: int) -> dict[str, Any]:
    texts = {
        400: "Malformed request (bad JSON, an unknown, repeated or bad query parameter, "
        "a run id holding NUL, a Host header naming no host this server answers for)",
        401: "Missing or wrong bearer token (every change; reads too with a read token); "
        "nothing was changed",
        404: "No such run or graph",
        409: "The run is not in a state that allows this",
        413: "Request body too large",
        415: "A request body declared as something other than JSON",
        422: "The request body does not fit the schema",
        503: "The store cannot answer now (a retry may cure it)",
    }
    return {str(code): _json("ApiError", texts[code]) for code in codes}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_RUN_ID = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
}
_SSE = {"description": "Server-sent events", "content": {"text/event-stream": {}}}


def _body(name: str, required: bool = False) -> dict[str, Any]:
    """A JSON request body; ``required`` when its schema has required fields (an absent
    body reads as ``{}``)."""
    return {
        "required": required,
        "content": {"application/json": {"schema": {"$ref": _REF.format(name=name)}}},
    }


def _action(
    summary: str, body: str | None, code: str = "202", required: bool = False
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "parameters": [_RUN_ID],
        "security": [{"bearer": []}],
        "responses": {
            code: _json("RunRef", "Accepted"),
            **_errors(404, 409, 413, 415, 422),
        },
    }
    if body is not None:
        operation["requestBody"] = _body(body, required)
    return {"post": operation}


def openapi_document(graph_names: list[str]) -> dict[str, Any]:
    """The API's OpenAPI document (paths relative to where the app is mounted).

    ``graph_names`` are the graphs ``POST /api/runs`` accepts (an enum in its schema).
    """
    _, components = msgspec.json.schema_components(
        [
            StartRequest,
            ResumeRequest,
            ApproveRequest,
            RejectRequest,
            RejectRequest,
            CancelRequest,
            ForkRequest,
            ReplayRequest,
            ReplayReport,
            ApiError,
            RunRef,
            RunList,
            RunDetail,
            EventPage,
            VerifyView,
            GraphList,
            ChainStatus,
        ],
        ref_template=_REF,
    )
    if graph_names:
        components["StartRequest"]["properties"]["graph"]["enum"] = graph_names
    components["RunState"] = {
        "type": "object",
        "description": "The fold of the run's log up to the requested seq, and in `chain` "
        "the check of the hash chain the read went through",
        "properties": {"chain": {"$ref": _REF.format(name="ChainStatus")}},
        "required": ["chain"],
    }
    paths: dict[str, Any] = {
        "/api/graphs": {
            "get": {
                "summary": "Graphs this server can start",
                "responses": {"200": _json("GraphList", "The registered graphs")},
            }
        },
        "/api/runs": {
            "get": {
                "summary": "List runs, newest first (by creation time), a page at a time",
                "description": (
                    "Every filter given must match. A page ends with `next_cursor`; pass it "
                    "as `cursor` (with the same filters) for the next page. Runs created "
                    "meanwhile sort before the cursor, so later pages neither repeat nor "
                    "skip a run, and a page costs the same however deep it is."
                ),
                "parameters": [
                    _query("status", {"type": "string", "enum": _STATUSES}, "Run status"),
                    _query(
                        "quality",
                        {"type": "string", "enum": ["clean", "degraded", "failed"]},
                        "Quality of a finished run",
                    ),
                    _query(
                        "graph",
                        {"type": "string"},
                        "Graph id, or graph hash (64 hex digits)",
                    ),
                    _query(
                        "created_after",
                        {"type": "number"},
                        "Runs created at or after this time (Unix seconds)",
                    ),
                    _query(
                        "created_before",
                        {"type": "number"},
                        "Runs created before this time (Unix seconds)",
                    ),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "Page size"),
                    _query(
                        "cursor",
                        {"type": "string", "maxLength": 80},
                        "The `next_cursor` of the page before",
                    ),
                ],
                "responses": {"200": _json("RunList", "A page of runs"), **_errors(400)},
            },
            "post": {
                "summary": "Start a run of a registered graph",
                "description": (
                    "`execute` says where the run executes: `server` (the default) runs it "
                    "in this server's process; `workers` records it for `magistrate worker` "
                    "processes on the same store and runs nothing here. The answer's "
                    "`detail` says which."
                ),
                "security": [{"bearer": []}],
                "requestBody": {**_body("StartRequest"), "required": True},
                "responses": {
                    "201": _json("RunRef", "Started"),
                    **_errors(404, 409, 413, 415, 422),
                },
            },
        },
        "/api/runs/{run_id}": {
            "get": {
                "summary": "A run: summary, graph, memory, verdicts per LLM node, goal outcome",
                "parameters": [_RUN_ID],
                "responses": {"200": _json("RunDetail", "The run"), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/events": {
            "get": {
                "summary": "Page through a run's events by seq",
                "description": (
                    "Events with seq > `after` that match the filters. A page reads at most "
                    "10,000 events of the log: with sparse filters it may be short, or "
                    "empty, and still give `next_after` to go on from."
                ),
                "parameters": [
                    _RUN_ID,
                    _query(
                        "after",
                        {"type": "integer", "minimum": 0, "maximum": MAX_INT},
                        "Events after this seq",
                    ),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "Page"),
                    _query("node", {"type": "string"}, "Comma-separated node ids"),
                    _query("type", {"type": "string"}, "Comma-separated tags; 'llm.' = prefix"),
                ],
                "responses": {"200": _json("EventPage", "Events"), **_errors(400, 404)},
            }
        },
        "/api/runs/{run_id}/state": {
            "get": {
                "summary": "The run's state at a seq (time travel)",
                "parameters": [
                    _RUN_ID,
                    _query(
                        "at",
                        {"type": "integer", "minimum": 1, "maximum": MAX_INT},
                        "Fold up to this seq",
                    ),
                ],
                "responses": {"200": _json("RunState", "Folded state"), **_errors(400, 404)},
            }
        },
        "/api/runs/{run_id}/verify": {
            "get": {
                "summary": "Check the run's hash chain",
                "parameters": [_RUN_ID],
                "responses": {"200": _json("VerifyView", "Chain check"), **_errors(404)},
            }
        },
        "/api/runs/{run_id}/stream": {
            "get": {
                "summary": "Live events of a run (read-only server-sent events)",
                "parameters": [
                    _RUN_ID,
                    _query(
                        "after",
                        {"type": "integer", "minimum": 0, "maximum": MAX_INT},
                        "Events after this seq",
                    ),
                ],
                "responses": {"200": _SSE, **_errors(400, 404)},
            }
        },
        "/api/stream": {
            "get": {
                "summary": "Live run changes (read-only server-sent events)",
                "responses": {"200": _SSE},
            }
        },
        "/api/runs/{run_id}/pause": _action("Pause a live run at its next node boundary", None),
        "/api/runs/{run_id}/resume": _action("Resume a run", "ResumeRequest"),
        "/api/runs/{run_id}/cancel": _action("Cancel a run", "CancelRequest"),
        "/api/runs/{run_id}/approve": _action(
            "Approve the gate a paused run waits at (only an approval passes a gate)",
            "ApproveRequest",
            required=True,
        ),
        "/api/runs/{run_id}/reject": _action(
            "Reject the gate a paused run waits at (final)", "RejectRequest", required=True
        ),
        "/api/runs/{run_id}/fork": _action(
            "Start a new run from a copy of this run's first events",
            "ForkRequest",
            "201",
            required=True,
        ),
        "/api/runs/{run_id}/replay": {
            "post": {
                "summary": "Replay the run against a registered graph: what would it decide "
                "otherwise? Nothing is written; no model or tool is called",
                "parameters": [_RUN_ID],
                "security": [{"bearer": []}],
                "requestBody": _body("ReplayRequest"),
                "responses": {
                    "200": _json("ReplayReport", "The report"),
                    **_errors(404, 409, 413, 415, 422),
                },
            }
        },
    }
    for operations in paths.values():  # what any request may meet: see _errors
        for operation in operations.values():
            operation["responses"].update(_errors(400, 401, 503))
    return {
        "openapi": "3.1.0",
        "info": {"title": "magistrate", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
