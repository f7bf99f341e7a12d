"""What the executor benchmark and its peer scripts share: the payload and the wire.

Standard library only: the peer scripts (``_langgraph_peer.py``, ``_dbos_executor_peer.py``)
run with their own venv's interpreter, import this file as the top-level module
``_peer_protocol`` (it sits beside them) and must not import magistrate packages.

A peer script is run either as ``script.py WORKLOAD key=value ...`` (one workload, one
JSON line out) or ``script.py serve`` (one JSON request per stdin line, one JSON reply
per stdout line; see ``benchmarks._peers.PeerProcess``). A request is
``{"workload": NAME, ...params}``; a reply is a JSON object of figures, or
``{"error": "..."}``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["payload", "serve_main"]


def payload(step: int, size: int) -> str:
    """The ``size``-byte ASCII message of step ``step``, the same on every side.

    Base64 of a SHA-256 chain: text-like and deterministic, but not trivially compressible,
    so a store that compresses cannot make the size figure meaningless.
    """
    chunks: list[str] = []
    length = 0
    block = 0
    while length < size:
        digest = hashlib.sha256(f"{step}:{block}".encode()).digest()
        chunks.append(base64.b64encode(digest).decode("ascii"))
        length += len(chunks[-1])
        block += 1
    return "".join(chunks)[:size]


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def serve_main(
    argv: list[str], usage: str | None, handle: Callable[[dict[str, Any]], dict[str, Any]]
) -> int:
    """Run a peer script's command line: ``serve`` or one ``WORKLOAD key=value ...``."""
    if not argv:
        print(usage or "usage: serve | WORKLOAD key=value ...", file=sys.stderr)
        return 2
    if argv[0] == "serve":
        # Replies own stdout: whatever a peer library prints goes to stderr instead.
        out, sys.stdout = sys.stdout, sys.stderr
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError as exc:
                reply: dict[str, Any] = {"error": f"bad request: {exc}"}
            else:
                reply = handle(request) if isinstance(request, dict) else {"error": "not a dict"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
        return 0
    one: dict[str, Any] = {"workload": argv[0]}
    for arg in argv[1:]:
        key, _, value = arg.partition("=")
        one[key] = _parse_value(value)
    reply = handle(one)
    print(json.dumps(reply))
    return 1 if "error" in reply else 0
