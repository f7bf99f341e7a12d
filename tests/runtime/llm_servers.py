"""Loopback HTTP servers that speak the OpenAI chat completions and Anthropic Messages wire
formats, scripted per test.

Each server runs ``http.server.ThreadingHTTPServer`` on 127.0.0.1 (port 0) in a thread.
A test queues the answers (:meth:`LlmServer.enqueue`: status, headers, a JSON or raw
body, an optional delay before answering) and afterwards reads what the server received
(:attr:`LlmServer.requests`). The servers check what a real API checks first (path,
method, authentication headers) and answer 404/401 in the API's error shape otherwise.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Scripted:
    """One scripted answer. ``body`` is JSON-encoded unless it is ``bytes``. ``drip``
    sends the body one byte at a time, waiting that many seconds before each byte.
    ``reset_after`` sends only that many bytes of the body (its content-length still the
    whole body's), then resets the connection (TCP RST)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drip: float = 0.0
    reset_after: int | None = None


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class LlmServer:
    """Base: a scripted loopback server; subclasses define the wire format's checks."""

    path = "/"

    def __init__(self) -> None:
        self._queue: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.requests: list[Received] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LlmServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()  # wakes handlers sleeping in a scripted delay
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def enqueue(self, *answers: Scripted) -> None:
        with self._lock:
            self._queue.extend(answers)

    def respond(self, body: Any, **kwargs: Any) -> None:
        self.enqueue(Scripted(body=body, **kwargs))

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    # -- subclass hooks
    def check(self, request: Received) -> Scripted | None:
        """An error answer when the request is not what the API accepts, else None."""
        return None

    def error_body(self, status: int, message: str) -> Any:
        return {"error": {"message": message}}

    # -- server side
    def _next(self, request: Received) -> Scripted:
        refused = self.check(request)
        if refused is not None:
            return refused
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return Scripted(status=500, body=self.error_body(500, "test server: no scripted answer"))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = Received(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with server._lock:
                    server.requests.append(request)
                answer = server._next(request)
                if answer.delay and server._stop.wait(answer.delay):
                    return
                payload = (
                    answer.body
                    if isinstance(answer.body, bytes)
                    else json.dumps(answer.body).encode()
                )
                try:
                    self.send_response(answer.status)
                    headers = {"content-type": "application/json", **answer.headers}
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    if answer.reset_after is not None:
                        self.wfile.write(payload[: answer.reset_after])
                        self.wfile.flush()
                        _reset(self.connection)
                        self.close_connection = True
                        return
                    if not answer.drip:
                        self.wfile.write(payload)
                        return
                    self.wfile.flush()
                    for index in range(len(payload)):
                        if server._stop.wait(answer.drip):
                            return
                        self.wfile.write(payload[index : index + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (a timeout test): nothing left to answer.
                    self.close_connection = True

        return Handler


def _reset(connection: socket.socket) -> None:
    """Close ``connection`` with a TCP RST (SO_LINGER 0), as a crashed peer or a proxy
    that gave up does, instead of an orderly FIN."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


class OpenAIServer(LlmServer):
    """Speaks ``POST /v1/chat/completions`` with ``Authorization: Bearer <key>``."""

    path = "/v1/chat/completions"

    def __init__(self, api_key: str = "test-openai-key") -> None:
        super().__init__()
        self.api_key = api_key

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def check(self, request: Received) -> Scripted | None:
        if request.path != self.path:
            return Scripted(status=404, body=self.error_body(404, f"no route {request.path}"))
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return Scripted(status=401, body=self.error_body(401, "Incorrect API key provided"))
        if not isinstance(request.body, dict) or "messages" not in request.body:
            return Scripted(status=400, body=self.error_body(400, "'messages' is required"))
        refused = openai_wire_error(request.body["messages"])
        if refused is not None:
            return Scripted(status=400, body=self.error_body(400, refused))
        return None

    def error_body(self, status: int, message: str) -> Any:
        return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


class AnthropicServer(LlmServer):
    """Speaks ``POST /v1/messages`` with ``x-api-key`` and ``anthropic-version``."""

    path = "/v1/messages"

    def __init__(self, api_key: str = "test-anthropic-key") -> None:
        super().__init__()
        self.api_key = api_key

    @property
    def base_url(self) -> str:
        return self.origin

    def check(self, request: Received) -> Scripted | None:
        if request.path != self.path:
            return Scripted(status=404, body=self.error_body(404, f"no route {request.path}"))
        if request.headers.get("x-api-key") != self.api_key:
            return Scripted(status=401, body=self.error_body(401, "invalid x-api-key"))
        if request.headers.get("anthropic-version") != "2023-06-01":
            return Scripted(status=400, body=self.error_body(400, "anthropic-version missing"))
        body = request.body
        if not isinstance(body, dict) or "max_tokens" not in body or "messages" not in body:
            return Scripted(status=400, body=self.error_body(400, "max_tokens: Field required"))
        refused = anthropic_wire_error(body["messages"])
        if refused is not None:
            return Scripted(status=400, body=self.error_body(400, refused))
        return None

    def error_body(self, status: int, message: str) -> Any:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
        return {
            "type": "error",
            "error": {"type": kind.get(status, "api_error"), "message": message},
        }


# -- the conversation rules the real APIs check


def openai_wire_error(messages: Any) -> str | None:
    """An assistant message's tool_calls must be followed by a tool message for each id."""
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return f"messages.[{index}]: 'tool' must respond to a preceding 'tool_calls'"
            pending.discard(message["tool_call_id"])
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {sorted(pending)}"
            )
        pending = {c["id"] for c in message.get("tool_calls") or []}
    if pending:
        return f"tool_call_ids did not have response messages: {sorted(pending)}"
    return None


def anthropic_wire_error(messages: Any) -> str | None:
    """Roles alternate from 'user'; each tool_use is answered by a tool_result block in the
    very next (user) message; content is never empty."""
    if not messages:
        return "messages: at least one message is required"
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        wanted = "user" if index % 2 == 0 else "assistant"
        if role != wanted:
            return f"messages.{index}: roles must alternate between 'user' and 'assistant'"
        if not content:
            return f"messages.{index}: content must be non-empty"
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if pending - answered:
            return (
                f"messages.{index}: tool_use ids were found without tool_result blocks "
                f"immediately after: {sorted(pending - answered)}"
            )
        if answered - pending:
            return f"messages.{index}.content: unexpected tool_use_id in tool_result blocks"
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return None


# -- canonical answer bodies


def openai_completion(
    text: str | None = "",
    *,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    model: str = "gpt-4o-mini-2024-07-18",
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """A chat completion; ``tool_calls`` are (id, name, arguments-JSON-string)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def anthropic_message(
    *blocks: dict[str, Any],
    input_tokens: int = 12,
    output_tokens: int = 7,
    model: str = "claude-3-5-haiku-20241022",
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """A Messages API answer made of content blocks (see :func:`text`, :func:`tool_use`)."""
    uses_tool = any(b.get("type") == "tool_use" for b in blocks)
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(blocks),
        "stop_reason": stop_reason or ("tool_use" if uses_tool else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(id: str, name: str, input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}
