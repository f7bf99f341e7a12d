"""The ASGI app: JSON API, server-sent event streams, /metrics, /openapi.json and the dashboard.

``create_app(runtime, graphs=..., token=...)`` returns a Starlette app that a host mounts in
its own ASGI app or that ``magistrate serve`` runs on uvicorn. Every request that changes
something (POST) needs ``Authorization: Bearer <token>``, or gets 401 and changes nothing;
reads need it too with ``read_token`` (see ``_guard``).
"""

from __future__ import annotations

import asyncio
import html
import secrets
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from actors import MagistrateError
from eventstore import EventStore

from .. import GraphSpec, RunHandle, Runtime
from ..events import check_run_id
from ..reads import RunReader
from ..spec import graph_hash, graph_to_dict
from ._errors import error_response as _error
from ._errors import json_response as _json
from ._errors import on_crash, on_error, on_http
from ._guard import Guard
from ._openapi import openapi_document
from ._params import (
    HttpError,
    choice,
    csv,
    integer,
    known,
    last_event_id,
    number,
    path_run_id,
    read_body,
    text,
)
from ._schemas import (
    ApproveRequest,
    CancelRequest,
    ForkRequest,
    GraphInfo,
    GraphList,
    RejectRequest,
    ReplayRequest,
    ResumeRequest,
    RunRef,
    StartRequest,
    VerifyView,
)
from ._sse import run_changes, run_events
from ._views import RunFilter

__all__ = ["create_app"]

_STATIC = Path(__file__).parent / "static"
_ENCODER = msgspec.json.Encoder()
_STATUSES = ("new", "running", "paused", "cancelled", "completed", "failed")
_QUALITIES = ("clean", "degraded", "failed")
_NO_CACHE = {"Cache-Control": "no-cache"}
# Where a started run executes, said in each answer to POST /api/runs.
_HERE = "executing in the server"
_FOR_WORKERS = "waiting for a worker (magistrate worker on this store)"
_SSE_HEADERS = {**_NO_CACHE, "X-Accel-Buffering": "no"}
#: Handlers whose query is not the API's: the dashboard's (its filters), and documents.
_PAGES = frozenset({"dashboard", "openapi_json", "metrics"})
#: The query parameters each API handler takes (none for the others).
_QUERIES = {
    "list_runs": frozenset(
        {"status", "quality", "graph", "created_after", "created_before", "limit", "cursor"}
    ),
    "list_events": frozenset({"after", "limit", "node", "type"}),
    "get_state": frozenset({"at"}),
    "stream_run": frozenset({"after"}),
}


class _DashboardFiles(StaticFiles):
    """The dashboard's files, revalidated by the browser on every load (a 304 while they
    are unchanged): its scripts share one scope and change together, so a browser must
    never run a copy it kept of one of them with new versions of the others."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers.update(_NO_CACHE)
        return response


Handler = Callable[[Request], Awaitable[Response]]


class _Api:
    """The handlers, bound to one runtime, its store and the registered graphs."""

    def __init__(
        self,
        runtime: Runtime,
        store: EventStore,
        graphs: dict[str, GraphSpec],
        registry: CollectorRegistry,
    ) -> None:
        self.runtime = runtime
        self.store = store
        self.graphs = graphs
        self.registry = registry
        self.reader = RunReader(store)
        self.openapi = _ENCODER.encode(openapi_document(list(graphs)))
        #: A lock per run id a start names, held while it is checked and started.
        self.starting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self.index = (_STATIC / "index.html").read_text(encoding="utf-8")

    # -- reads ---------------------------------------------------------------------------

    async def list_graphs(self, request: Request) -> Response:
        return _json(
            GraphList(
                graphs=[
                    GraphInfo(name=name, graph_hash=graph_hash(g), spec=graph_to_dict(g))
                    for name, g in self.graphs.items()
                ]
            )
        )

    async def list_runs(self, request: Request) -> Response:
        filters = RunFilter(
            status=choice(request, "status", _STATUSES),
            quality=choice(request, "quality", _QUALITIES),
            graph=text(request, "graph"),
            created_after=number(request, "created_after"),
            created_before=number(request, "created_before"),
        )
        limit = integer(request, "limit", 50, 1, 500)
        cursor = text(request, "cursor", 80)
        try:
            page = await self.reader.list_runs(filters.query(), cursor=cursor, limit=limit)
        except ValueError as exc:  # a cursor no listing gave
            raise HttpError(400, "bad_query", str(exc)) from None
        return _json(page)

    async def get_run(self, request: Request) -> Response:
        return _json(await self.reader.detail(path_run_id(request)))

    async def list_events(self, request: Request) -> Response:
        page = await self.reader.events(
            path_run_id(request),
            after=integer(request, "after", 0, 0),
            limit=integer(request, "limit", 200, 1, 1000),
            nodes=csv(request, "node"),
            types=csv(request, "type"),
        )
        return _json(page)

    async def get_state(self, request: Request) -> Response:
        run_id = path_run_id(request)
        at = integer(request, "at", 0, 1) or None
        try:
            view = await self.reader.state(run_id, at_seq=at)
        except ValueError as exc:  # past the run's last event
            raise HttpError(400, "bad_query", str(exc)) from None
        return _json({**msgspec.to_builtins(view.state), "chain": view.chain})

    async def verify(self, request: Request) -> Response:
        run_id = path_run_id(request)
        await self.reader.info(run_id)
        report = await self.reader.verify(run_id)
        return _json(
            VerifyView(
                run_id=run_id,
                ok=report.ok,
                checked=report.checked,
                broken_at=report.broken_at,
                reason=report.reason,
            )
        )

    async def stream_run(self, request: Request) -> Response:
        run_id = path_run_id(request)
        await self.reader.info(run_id)
        # Both checked: a reconnecting client sends its first ?after= and Last-Event-ID.
        after, last = integer(request, "after", 0, 0), last_event_id(request)
        after = last if last is not None else after
        if request.method == "HEAD":
            return _stream(_nothing())
        return _stream(run_events(self.store, run_id, after))

    async def stream_runs(self, request: Request) -> Response:
        if request.method == "HEAD":
            return _stream(_nothing())
        # Taken before the answer's headers go out: a client that has them misses nothing.
        return _stream(run_changes(self.runtime, await self.store.head_position()))

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi_json(self, request: Request) -> Response:
        return Response(self.openapi, media_type="application/json")

    async def dashboard(self, request: Request) -> Response:
        # The page's links and API calls start at the mount point of this app.
        root = html.escape(str(request.scope.get("root_path", "")).rstrip("/"), quote=True)
        return HTMLResponse(self.index.replace("{{ROOT}}", root), headers=_NO_CACHE)

    # -- changes (each needs the token: see _guard) --------------------------------------

    async def start_run(self, request: Request) -> Response:
        body = await read_body(request, StartRequest)
        try:
            check_run_id(body.run_id)  # the library's rule, beyond the schema's characters
        except ValueError as exc:
            raise HttpError(422, "invalid_body", str(exc)) from None
        graph = self.graphs.get(body.graph)
        if graph is None:
            known = ", ".join(sorted(self.graphs)) or "none"
            return _error(404, "unknown_graph", f"no graph named {body.graph!r} (known: {known})")
        if body.run_id is None:
            return await self._start(body, graph)
        # Starts naming one id (a client's retry) one after the other: the next finds the run.
        lock = self.starting.get(body.run_id)
        if lock is None:
            lock = self.starting[body.run_id] = asyncio.Lock()
        async with lock:
            if await self.store.get_run(body.run_id) is not None:
                return _error(
                    409, "run_exists", f"run {body.run_id} already exists", run_id=body.run_id
                )
            return await self._start(body, graph)

    async def _start(self, body: StartRequest, graph: GraphSpec) -> Response:
        try:
            if body.execute == "workers":
                run_id = await self.runtime.submit(graph, input=body.input, run_id=body.run_id)
                return _json(RunRef(run_id=run_id, action="submitted", detail=_FOR_WORKERS), 201)
            handle = await self.runtime.start(graph, input=body.input, run_id=body.run_id)
        except ValueError as exc:  # the run id is checked: a graph the store cannot keep
            if isinstance(exc, MagistrateError):
                raise
            raise HttpError(400, "bad_graph", str(exc)) from None
        return _json(RunRef(run_id=handle.run_id, action="started", detail=_HERE), 201)

    async def pause(self, request: Request) -> Response:
        run_id = path_run_id(request)
        await self.reader.info(run_id)
        await self.runtime.pause(run_id)
        return _json(RunRef(run_id=run_id, action="pause requested"), 202)

    async def resume(self, request: Request) -> Response:
        run_id = path_run_id(request)
        body = await read_body(request, ResumeRequest)
        await self.runtime.resume(run_id, input=body.input or None)
        return _json(RunRef(run_id=run_id, action="resumed"), 202)

    async def approve(self, request: Request) -> Response:
        run_id = path_run_id(request)
        body = await read_body(request, ApproveRequest)
        handle = await self.runtime.approve(
            run_id, input=body.input, by=body.by, expected_seq=body.expected_seq
        )
        return _json(RunRef(run_id=run_id, action="approved", detail=_next(handle)), 202)

    async def reject(self, request: Request) -> Response:
        run_id = path_run_id(request)
        body = await read_body(request, RejectRequest)
        handle = await self.runtime.reject(
            run_id, by=body.by, reason=body.reason, expected_seq=body.expected_seq
        )
        return _json(RunRef(run_id=run_id, action="rejected", detail=_next(handle)), 202)

    async def cancel(self, request: Request) -> Response:
        run_id = path_run_id(request)
        body = await read_body(request, CancelRequest)
        await self.runtime.cancel(run_id, reason=body.reason)
        return _json(RunRef(run_id=run_id, action="cancel requested"), 202)

    async def fork(self, request: Request) -> Response:
        run_id = path_run_id(request)
        body = await read_body(request, ForkRequest)
        handle = await self.runtime.fork(run_id, body.at_seq, input=body.input or None)
        return _json(RunRef(run_id=handle.run_id, action="forked"), 201)

    async def replay(self, request: Request) -> Response:
        run_id = path_run_id(request)
        body = await read_body(request, ReplayRequest)
        graph = None
        if body.graph is not None:
            graph = self.graphs.get(body.graph)
            if graph is None:
                known = ", ".join(sorted(self.graphs)) or "none"
                return _error(
                    404, "unknown_graph", f"no graph named {body.graph!r} (known: {known})"
                )
        report = await self.runtime.replay(
            run_id,
            graph,
            allow_imports=self.runtime.nodes.allow_imports,
            rejudge=body.rejudge,
        )
        return _json(report)


def _stream(messages: AsyncIterator[bytes]) -> Response:
    return StreamingResponse(messages, media_type="text/event-stream", headers=_SSE_HEADERS)


async def _nothing() -> AsyncIterator[bytes]:
    """A HEAD's stream: the headers a GET would have, and an end (a stream that never
    ends would hold the connection, and the next request on it, for ever)."""
    return
    yield


def _next(handle: RunHandle | None) -> str:
    """What follows a gate's decision, as the runtime answered it."""
    if handle is not None:
        return "the run goes on in this server"
    return "recorded; the run ended, or waits for its owner or a worker to continue it"


def create_app(
    runtime: Runtime,
    *,
    graphs: Mapping[str, GraphSpec] | Iterable[GraphSpec] = (),
    token: str | None = None,
    read_token: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    registry: CollectorRegistry | None = None,
) -> Starlette:
    """The server as an ASGI app, for uvicorn or for mounting under a host's own app.

    ``runtime`` must be entered (``async with``) by the caller, around the app's lifetime,
    and have a store. ``graphs`` are what ``POST /api/runs`` may start, by name (a mapping)
    or by their ids (an iterable). ``token`` guards every request that changes something
    (``Authorization: Bearer <token>``, the scheme in any case); None generates one,
    readable as ``app.state.token`` (show it to the user once). ``read_token`` asks for it
    on reads too (runs, events, state, streams, /metrics, /openapi.json; the dashboard's
    page and static files stay open, as they hold no run data). ``allowed_hosts``, when
    given, are the only hosts a request's ``Host`` header may name (400 otherwise).
    Every answer carries a Content-Security-Policy, ``X-Frame-Options: DENY`` and
    ``X-Content-Type-Options: nosniff``.
    ``registry`` is the Prometheus registry ``/metrics`` exposes (default: the registry of
    the runtime's ``metrics``, else prometheus_client's global one).
    Raises ValueError for two graphs with one name; a runtime without a store answers 503.
    """
    named: dict[str, GraphSpec] = {}
    items = graphs.items() if isinstance(graphs, Mapping) else ((g.id, g) for g in graphs)
    for name, graph in items:
        if name in named:
            raise ValueError(f"two graphs are named {name!r}")
        named[name] = graph
    secret = token or secrets.token_urlsafe(24)
    holder: dict[str, _Api] = {}

    def api() -> _Api:
        # The runtime opens its store on entry, which may come after create_app.
        found = holder.get("api")
        if found is None:
            if runtime.store is None:
                raise HttpError(503, "unavailable", "the runtime is not started")
            if registry is not None:
                scraped = registry
            elif runtime.metrics is not None:
                scraped = runtime.metrics.registry
            else:
                scraped = REGISTRY
            found = holder["api"] = _Api(runtime, runtime.store, named, scraped)
        return found

    def route(name: str, post: str | None = None) -> Handler:
        """The handler ``name`` (``post`` for a POST to the same path: one route, so a 405
        there lists every method the path takes)."""

        async def call(request: Request) -> Response:
            chosen = post if post is not None and request.method == "POST" else name
            if chosen not in _PAGES:  # an API request: a query it does not take is refused
                known(request, _QUERIES.get(chosen, frozenset()))
            return await getattr(api(), chosen)(request)  # type: ignore[no-any-return]

        return call

    routes = [
        Route("/", route("dashboard"), methods=["GET"]),
        Route("/runs/{run_id}", route("dashboard"), methods=["GET"]),
        Route("/approvals", route("dashboard"), methods=["GET"]),
        Route("/openapi.json", route("openapi_json"), methods=["GET"]),
        Route("/metrics", route("metrics"), methods=["GET"]),
        Route("/api/graphs", route("list_graphs"), methods=["GET"]),
        Route("/api/runs", route("list_runs", post="start_run"), methods=["GET", "POST"]),
        Route("/api/stream", route("stream_runs"), methods=["GET"]),
        Route("/api/runs/{run_id}", route("get_run"), methods=["GET"]),
        Route("/api/runs/{run_id}/events", route("list_events"), methods=["GET"]),
        Route("/api/runs/{run_id}/state", route("get_state"), methods=["GET"]),
        Route("/api/runs/{run_id}/verify", route("verify"), methods=["GET"]),
        Route("/api/runs/{run_id}/stream", route("stream_run"), methods=["GET"]),
        *(
            Route(f"/api/runs/{{run_id}}/{action}", route(action), methods=["POST"])
            for action in ("pause", "resume", "approve", "reject", "cancel", "fork", "replay")
        ),
        Mount("/static", _DashboardFiles(directory=_STATIC), name="static"),
    ]
    guard = Middleware(Guard, token=secret, guard_reads=read_token, allowed_hosts=allowed_hosts)
    app = Starlette(
        routes=routes,
        middleware=[guard],
        exception_handlers={
            HttpError: on_error,
            MagistrateError: on_error,
            HTTPException: on_http,
            Exception: on_crash,
        },
    )
    app.state.token = secret
    return app
