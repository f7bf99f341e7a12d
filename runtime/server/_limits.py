"""Bounds on what clients may hold open: connections, time to send a request's head, idle
keep-alive, header size. Without them, clients that send a header line now and then keep
their sockets forever and exhaust the server's file descriptors.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import msgspec
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ServerLimits", "bounded_config"]


class ServerLimits(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`runtime.server.serve` allows clients.

    ``max_connections``: open connections at once; one more is closed as soon as it is
    accepted (event streams count: each dashboard page holds one). ``header_timeout``:
    seconds a connection has to send a request's head, from its start and after each
    answer, and as many again for its body, from the head (a body a refused request still
    owes: from the answer); then it is closed. ``keep_alive``: seconds an idle connection
    stays open between requests. ``max_header_bytes``: the largest request head (a larger
    one is answered 400).
    """

    max_connections: int = 256
    header_timeout: float = 10.0
    keep_alive: float = 5.0
    max_header_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {self.max_connections}")
        for name in ("header_timeout", "keep_alive"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if self.max_header_bytes < 1024:
            raise ValueError(f"max_header_bytes must be at least 1024, got {self.max_header_bytes}")


class _BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and a deadline for each request head."""

    limits = ServerLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            # Closed without a word: an answer or a log line per refused connection is what
            # a flood of connections would turn into a flood of writes.
            transport.abort()
            return
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        waiting = self.conn.their_state is h11.IDLE
        super().data_received(data)
        if waiting and self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._arm_head_deadline()  # the head came: its body has the same time

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_deadline()

    def send_400_response(self, msg: str) -> None:
        # A request the HTTP parser refused before the app saw it (a head past
        # max_header_bytes, a malformed line) answered in the API's error shape too.
        detail = (
            f"{msg.rstrip('.')}: malformed, or a head over {self.limits.max_header_bytes} bytes"
        )
        body = msgspec.json.encode({"error": "bad_request", "detail": detail})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.limits.header_timeout, self._head_late)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_late(self) -> None:
        self._head_deadline = None
        # IDLE: no complete request head came since the deadline was armed; SEND_BODY: its
        # body did not end (a request being answered has moved the client's state on to
        # DONE, and its answer re-arms the deadline). A body the server no longer reads
        # (the answer went before it: a 401) would otherwise hold the socket for ever.
        late = self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
        if late and not self.transport.is_closing():
            self.transport.abort()


def bounded_config(app: Any, *, host: str, port: int, limits: ServerLimits) -> uvicorn.Config:
    """A uvicorn configuration for ``app`` that holds clients to ``limits``."""
    protocol = type("BoundedH11", (_BoundedH11,), {"limits": limits})
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_level="warning",
        lifespan="off",
        timeout_keep_alive=max(1, round(limits.keep_alive)),
        h11_max_incomplete_event_size=limits.max_header_bytes,
        # Event streams never end by themselves: give them a moment, then close them.
        timeout_graceful_shutdown=2,
    )
