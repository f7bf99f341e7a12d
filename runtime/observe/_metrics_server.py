"""A ``/metrics`` endpoint of its own, for an application that has no HTTP server."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import start_http_server

__all__ = ["MetricsServer", "serve_metrics"]


class MetricsServer:
    """A running ``/metrics`` endpoint (see :func:`serve_metrics`); ``close()`` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and wait for the server thread to end."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve_metrics(
    port: int = 9464, *, host: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> MetricsServer:
    """Serve ``registry`` (default: the global one) on ``http://host:port/metrics`` from a
    daemon thread, for an application that has no HTTP server of its own.

    Binds to loopback unless ``host`` says otherwise; ``port=0`` picks a free port (read
    it from :attr:`MetricsServer.port`). Returns at once; raises OSError if the port is
    taken.
    """
    server, thread = start_http_server(
        port, addr=host, registry=registry if registry is not None else REGISTRY
    )
    return MetricsServer(server, thread)
