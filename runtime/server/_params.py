"""Reading a request: query parameters, JSON bodies, a path's run id, ``Last-Event-ID``.

Each reader raises :class:`HttpError` (a 4xx with a code and a sentence) for input it
cannot take, so malformed input is a client error, never a server one.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request

from ._openapi import MAX_INT

__all__ = [
    "HttpError",
    "choice",
    "csv",
    "integer",
    "known",
    "last_event_id",
    "number",
    "path_run_id",
    "read_body",
    "text",
]

MAX_BODY = 1 << 20
_LISTS = frozenset({"node", "type"})
_SEQ = re.compile(r"[0-9]{1,18}")
B = TypeVar("B", bound=msgspec.Struct)


class HttpError(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail


def known(request: Request, names: frozenset[str]) -> None:
    """Refuse a query parameter the path does not take, or one given twice: either would
    be a filter (or an ``expected_seq``) silently not applied."""
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        shown = name if len(name) <= 80 else name[:80] + "..."
        if name not in names:
            takes = ", ".join(sorted(names)) or "none"
            raise HttpError(
                400, "bad_query", f"unknown query parameter {shown!r} (this path takes: {takes})"
            )
        if name in seen:
            lists = " (node and type take comma-separated lists)" if name in _LISTS else ""
            raise HttpError(400, "bad_query", f"query parameter {shown!r} is given twice{lists}")
        seen.add(name)


def integer(request: Request, name: str, default: int, low: int, high: int = MAX_INT) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, "bad_query", f"{name} must be an integer, got {raw!r}") from None
    if value < low or value > high:
        raise HttpError(400, "bad_query", f"{name} must be between {low} and {high}, got {value}")
    return value


def number(request: Request, name: str) -> float | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(400, "bad_query", f"{name} must be a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise HttpError(400, "bad_query", f"{name} must be a finite number")
    return value


def choice(request: Request, name: str, allowed: tuple[str, ...]) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in allowed:
        raise HttpError(400, "bad_query", f"{name} must be one of {', '.join(allowed)}")
    return raw


def text(request: Request, name: str, max_length: int = 200) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_length or "\x00" in raw:
        raise HttpError(400, "bad_query", f"{name} must be text of at most {max_length} chars")
    return raw


def csv(request: Request, name: str) -> list[str]:
    raw = request.query_params.get(name) or ""
    return [part for part in (p.strip() for p in raw.split(",")) if part]


async def read_body(request: Request, kind: type[B]) -> B:
    # Refused before it is held: by its declared length, else once the bytes read pass it.
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise _too_large()
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise _too_large()
            chunks.append(chunk)
    except ClientDisconnect:  # the client's doing (or its deadline's), no bug to log
        raise HttpError(400, "bad_request", "the connection closed before the body ended") from None
    data = b"".join(chunks)
    if not data.strip():
        data = b"{}"
    elif not _is_json(request.headers.get("content-type")):
        media = request.headers["content-type"].partition(";")[0].strip()[:100]
        detail = f"request bodies are JSON (Content-Type: application/json), not {media!r}"
        raise HttpError(415, "unsupported_media_type", detail)
    return _decode(data, kind)


#: What a body that is not JSON raises: invalid UTF-8 in a string and nesting past
#: msgspec's depth are malformed JSON too.
_MALFORMED = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def _decode(data: bytes, kind: type[B]) -> B:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        refused = str(exc)  # perhaps an integral number where an int goes (below)
    except _MALFORMED as exc:
        raise HttpError(400, "invalid_json", _not_json(data, exc)) from None
    try:
        body = msgspec.json.decode(data)  # the whole body: the typed read stopped early
    except msgspec.ValidationError:  # a number out of range: as the typed read said
        raise HttpError(422, "invalid_body", refused) from None
    except _MALFORMED as exc:
        raise HttpError(400, "invalid_json", _not_json(data, exc)) from None
    try:
        return msgspec.convert(_integral(body, kind), type=kind)
    except msgspec.ValidationError as exc:
        raise HttpError(422, "invalid_body", str(exc)) from None


def _integral(body: object, kind: type[msgspec.Struct]) -> object:
    """``body`` with an integral number (``1.0``, ``1e2``) made an int in each field of
    ``kind`` that takes an int: JSON Schema's ``integer``, which the OpenAPI description
    declares, counts it as one (msgspec does not)."""
    if not isinstance(body, dict):
        return body
    info = msgspec.inspect.type_info(kind)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        value = body.get(field.encode_name)
        kinds = field.type.types if isinstance(field.type, msgspec.inspect.UnionType) else ()
        takes_int = any(isinstance(t, msgspec.inspect.IntType) for t in (field.type, *kinds))
        if takes_int and isinstance(value, float) and value.is_integer():
            body[field.encode_name] = int(value)
    return body


def _not_json(data: bytes, exc: Exception) -> str:
    """Why ``data`` is refused: msgspec's words, unless it is JSON text naming a lone
    surrogate (``"\\ud800"``), which msgspec calls truncated: no UTF-8 text holds one."""
    try:
        json.dumps(json.loads(data), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return (
            "request body is not valid UTF-8 JSON text: a \\u escape in it names a lone "
            "surrogate (half of a UTF-16 pair), which no UTF-8 text holds"
        )
    except (ValueError, RecursionError):
        pass  # not JSON to Python either: msgspec's reason stands
    return f"request body is not JSON: {exc}"


def _is_json(content_type: str | None) -> bool:
    """Whether a body declared so may be JSON: undeclared, ``application/json`` or a
    ``+json`` type (parameters such as ``charset`` aside)."""
    if content_type is None:
        return True
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _too_large() -> HttpError:
    return HttpError(413, "body_too_large", f"request bodies are limited to {MAX_BODY} bytes")


def path_run_id(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    if "\x00" in run_id:
        raise HttpError(400, "bad_run_id", "a run id holds no NUL character")
    return run_id


def last_event_id(request: Request) -> int | None:
    """The ``Last-Event-ID`` a reconnecting client sends (a run's seq), if it is one."""
    raw = request.headers.get("last-event-id", "").strip()
    if not raw:
        return None
    if _SEQ.fullmatch(raw) is None or int(raw) > MAX_INT:
        raise HttpError(400, "bad_last_event_id", "Last-Event-ID must be a seq (an integer)")
    return int(raw)
