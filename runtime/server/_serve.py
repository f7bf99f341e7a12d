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

from .. import GraphSpec, Runtime
from ._app import create_app
from ._guard import LOOPBACK_HOSTS
from ._limits import ServerLimits, bounded_config

__all__ = ["is_loopback", "serve"]

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether the bind address ``host`` is loopback: exactly 127.0.0.1, ::1 or localhost
    (any other address, 127.0.0.2 included, is exposed)."""
    return host.strip("[]").lower() in LOOPBACK_HOSTS


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
    read_token: bool = False,
    allowed_hosts: Iterable[str] = (),
    limits: ServerLimits | None = None,
    registry: CollectorRegistry | None = None,
    announce: Callable[[str], None] = _say,
) -> None:
    """Serve the API and dashboard for ``runtime`` (already entered) until SIGINT/SIGTERM.

    In the main thread, SIGINT and SIGTERM stop the server and ``serve`` returns (a second
    one stops waiting for open connections); elsewhere, cancel it to stop it.

    Binds to loopback (127.0.0.1, ::1 or localhost) unless ``host`` says otherwise. On
    loopback, only requests whose Host header names a loopback address or one of
    ``allowed_hosts`` are answered (400 otherwise), changes need the token, and reads need
    it too with ``read_token``. Any other ``host`` is exposed: ``token`` is required
    (ValueError before anything listens, without one), every
    request needs it, reads included, and the Host header must name ``host`` or one of
    ``allowed_hosts``. Without ``token`` (loopback only) one is generated and passed to
    ``announce`` (stderr by default) once the server listens, in the dashboard's address;
    a given token is never printed. ``limits`` (default ``ServerLimits()``) bounds what
    clients hold open (connections, time to send a request head, keep-alive). Blocks until
    the server stops; cancelling it stops the server. Raises OSError when it cannot listen (the port
    is in use, the host unknown).
    """
    extra = list(allowed_hosts)
    if is_loopback(host):
        hosts = [*LOOPBACK_HOSTS, *extra]
    elif token is None:
        raise ValueError(
            f"host {host} is not loopback: serving beyond loopback needs a token of yours "
            "(--token-file FILE or $MAGISTRATE_TOKEN), which every request then needs, "
            "reads included"
        )
    else:
        hosts, read_token = [host, *extra], True
    app = create_app(
        runtime,
        graphs=graphs,
        token=token,
        read_token=read_token,
        allowed_hosts=hosts,
        registry=registry,
    )
    config = bounded_config(app, host=host, port=port, limits=limits or ServerLimits())
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
