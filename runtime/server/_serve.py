"""Run the server on uvicorn: what ``magistrate serve`` calls."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import anyio
import uvicorn
from prometheus_client import CollectorRegistry
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp

from .. import GraphSpec, Runtime
from ._app import create_app

__all__ = ["serve"]

LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handling: uvicorn re-raises a caught SIGINT or
    SIGTERM once it has shut down, which would kill the process before the caller closes its
    runtime and store. :func:`serve` listens for them itself and returns normally."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started  # once it listens, before it answers a request

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()


async def _stop_on_signals(server: uvicorn.Server) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if server.should_exit:
                server.force_exit = True  # a second signal: stop waiting for connections
            server.should_exit = True


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def serve(
    runtime: Runtime,
    *,
    graphs: Mapping[str, GraphSpec] | Iterable[GraphSpec] = (),
    host: str = LOOPBACK,
    port: int = 8765,
    token: str | None = None,
    registry: CollectorRegistry | None = None,
    announce: Callable[[str], None] = _say,
) -> None:
    """Serve the API and dashboard for ``runtime`` (already entered) until SIGINT/SIGTERM.

    In the main thread, SIGINT and SIGTERM stop the server and ``serve`` returns (a second
    one stops waiting for open connections); elsewhere, cancel it to stop it.

    Binds to loopback unless ``host`` says otherwise; on loopback, only requests whose Host
    header names a loopback address are answered (400 otherwise). Without ``token`` one is
    generated and passed to ``announce`` (stderr by default) once the server listens, in
    the dashboard's address; a configured token is never printed. Blocks until the server
    stops; cancelling it stops the server. Raises OSError when it cannot listen (the port
    is in use, the host unknown).
    """
    app = create_app(runtime, graphs=graphs, token=token, registry=registry)
    served: ASGIApp = app
    if host in _LOOPBACK_NAMES:
        # Reads need no token, so a web page must not reach them by rebinding its own
        # DNS name to 127.0.0.1: only requests addressed to a loopback name are answered.
        served = TrustedHostMiddleware(app, allowed_hosts=list(_LOOPBACK_NAMES))
    config = uvicorn.Config(
        served,
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        # Event streams never end by themselves: give them a moment, then close them.
        timeout_graceful_shutdown=2,
    )
    shown = host if ":" not in host else f"[{host}]"
    if token is None:
        lines = [
            f"magistrate: dashboard at http://{shown}:{port}/#token={app.state.token}",
            "magistrate: API token (shown once): " + app.state.token,
        ]
    else:
        lines = [f"magistrate: dashboard at http://{shown}:{port}/"]

    def listening() -> None:
        for line in lines:
            announce(line)

    server = _Server(config, listening)
    failed: SystemExit | None = None
    async with anyio.create_task_group() as tg:
        if sys.platform != "win32" and threading.current_thread() is threading.main_thread():
            tg.start_soon(_stop_on_signals, server)
        try:
            await server.serve()
        except anyio.get_cancelled_exc_class():
            # uvicorn leaves its listening socket open when cancelled: close it, then go.
            with anyio.CancelScope(shield=True):
                await server.shutdown()
            raise
        except SystemExit as exc:
            # uvicorn logs why it could not start (a port in use, an unknown host) and
            # exits; raise what it met instead, outside the task group (no exception group).
            failed = exc
        tg.cancel_scope.cancel()
    if failed is not None:
        cause = failed.__context__
        reason = cause if cause is not None else f"uvicorn exited with {failed.code}"
        raise OSError(f"cannot serve on {shown}:{port}: {reason}") from cause
