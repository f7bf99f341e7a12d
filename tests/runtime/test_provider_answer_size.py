"""The size limit of a provider's answer (``max_response_bytes``), against loopback
servers that swell without end, drip a large body, or send a small gzip body that
decompresses to a huge one."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runtime._errors import ProviderError
from runtime.providers._anthropic import AnthropicProvider
from runtime.providers._base import ChatMessage, LlmRequest
from runtime.providers._openai import OpenAIProvider
from runtime.providers._settings import DEFAULT_MAX_RESPONSE_BYTES

from .llm_servers import anthropic_message, openai_completion, text

pytestmark = pytest.mark.anyio

#: A handler's way to answer: gets the request handler, writes the whole answer.
Answer = Callable[[BaseHTTPRequestHandler], None]

MIB = 1024 * 1024


class Server:
    """A loopback HTTP/1.1 server answering every POST with ``answer``; it counts the
    body bytes it managed to send (the client stops reading at the limit)."""

    def __init__(self, answer: Answer) -> None:
        self.sent = 0
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                try:
                    answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what this test expects
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.count = lambda n: setattr(server, "sent", server.sent + n)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _headers(handler: BaseHTTPRequestHandler, **headers: str) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Server]]:
    servers: list[Server] = []

    def start(answer: Answer) -> Server:
        servers.append(Server(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def openai(server: Server, **kwargs: object) -> OpenAIProvider:
    options: dict[str, object] = {"api_key": "k", "base_url": server.url, "max_retries": 2}
    options.update(kwargs)
    return OpenAIProvider(**options)  # type: ignore[arg-type]


def ask() -> LlmRequest:
    return LlmRequest(messages=[ChatMessage(role="user", content="Hello")])


def endless(server: Server) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        _headers(handler, transfer_encoding="chunked")
        piece = b'{"choices": [' + b" " * (64 * 1024)
        while not server.stop.is_set():
            _chunk(handler, piece)
            server.count(len(piece))

    return answer


async def test_an_endless_answer_ends_at_the_limit_not_retried(
    serve: Callable[[Answer], Server],
) -> None:
    holder: list[Server] = []
    server = serve(lambda handler: endless(holder[0])(handler))
    holder.append(server)
    async with openai(server, max_response_bytes=MIB) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask())
        stats = llm.statistics()
    assert "larger than the limit of 1048576 bytes (max_response_bytes)" in str(caught.value)
    assert caught.value.retryable is False
    assert stats.attempts == 1 and stats.failures == 1
    # The client stopped reading near the limit: the server could send little more
    # than what sits in the sockets' buffers.
    assert server.sent < 64 * MIB


async def test_a_dripping_answer_past_the_limit_fails_on_size_not_time(
    serve: Callable[[Answer], Server],
) -> None:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        _headers(handler, transfer_encoding="chunked")
        for _ in range(400):
            _chunk(handler, b" " * 4096)
            time.sleep(0.005)
        _chunk(handler, b"")

    server = serve(answer)
    async with openai(server, max_response_bytes=100_000, timeout=60.0) as llm:
        with pytest.raises(ProviderError, match="limit of 100000 bytes"):
            await llm.complete(ask())


def gzip_answer(body: bytes) -> Answer:
    packed = gzip.compress(body, compresslevel=9)

    def answer(handler: BaseHTTPRequestHandler) -> None:
        _headers(handler, content_encoding="gzip", content_length=str(len(packed)))
        handler.wfile.write(packed)

    return answer


async def test_a_gzip_bomb_is_counted_decompressed(serve: Callable[[Answer], Server]) -> None:
    bomb = b'{"choices": [], "pad": "' + b"A" * (DEFAULT_MAX_RESPONSE_BYTES + MIB) + b'"}'
    server = serve(gzip_answer(bomb))
    assert len(gzip.compress(bomb)) < MIB  # small on the wire
    async with openai(server) as llm:  # the default limit
        with pytest.raises(ProviderError) as caught:
            await llm.complete(ask())
    assert f"limit of {DEFAULT_MAX_RESPONSE_BYTES} bytes" in str(caught.value)


async def test_a_compressed_answer_under_the_limit_reads_as_before(
    serve: Callable[[Answer], Server],
) -> None:
    body = json.dumps(openai_completion("hello, compressed")).encode()
    server = serve(gzip_answer(body))
    async with openai(server, max_response_bytes=len(body)) as llm:
        answer = await llm.complete(ask())
    assert answer.text == "hello, compressed"


async def test_the_anthropic_provider_has_the_same_limit(
    serve: Callable[[Answer], Server],
) -> None:
    big = json.dumps(anthropic_message(text("x" * 50_000))).encode()
    server = serve(gzip_answer(big))
    async with AnthropicProvider(
        api_key="k", base_url=server.url.removesuffix("/v1"), max_response_bytes=10_000
    ) as llm:
        with pytest.raises(ProviderError, match="limit of 10000 bytes"):
            await llm.complete(ask())


def test_the_limit_is_a_positive_number_of_bytes() -> None:
    with pytest.raises(ValueError, match="max_response_bytes"):
        OpenAIProvider(api_key="k", max_response_bytes=0)
