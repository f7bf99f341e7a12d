"""``magistrate serve``: the HTTP API and web dashboard over a store, on uvicorn.

Runs started, approved or resumed from the API run in this process. The server binds to
127.0.0.1 unless ``--host`` says otherwise; every request that changes something needs
the token (``--token-file`` or ``--token``, else ``$MAGISTRATE_TOKEN``, or on loopback
one generated and printed once). Beyond loopback a token of the user's is required and reads
need it too.
"""

from __future__ import annotations

import argparse
import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from .. import Runtime, load_graph
from ..observe import default_metrics
from ..server import serve
from ._commands import add_command
from ._common import (
    EXIT_OK,
    UsageError,
    add_allow_imports_option,
    add_store_option,
    add_tools_option,
    allowed_imports,
    open_store,
)
from ._import_path import search_working_directory
from ._wiring import imports_named, make_provider, tools_from_modules

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_command(sub, "serve")
    add_store_option(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    p.add_argument(
        "--token",
        default=None,
        help="the bearer token (visible to every local user in ps: prefer --token-file or "
        "$MAGISTRATE_TOKEN; on loopback without one, a token is generated and printed once)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        type=Path,
        default=None,
        help="read the bearer token from FILE (its first line)",
    )
    p.add_argument(
        "--read-token",
        action="store_true",
        help="on loopback, ask the token for reads too (beyond loopback it always is)",
    )
    p.add_argument(
        "--allowed-host",
        metavar="HOST",
        action="append",
        default=[],
        help="a host name requests may be addressed to besides --host, e.g. the name a "
        "proxy or DNS gives the server (repeatable)",
    )
    p.add_argument(
        "--graph",
        metavar="GRAPH_FILE",
        action="append",
        default=[],
        help="a graph the API and dashboard may start, by its id (repeatable)",
    )
    p.add_argument(
        "--provider",
        metavar="P",
        help="the model for LLM nodes: openai, anthropic or scripted:FILE",
    )
    add_tools_option(p)
    add_allow_imports_option(
        p,
        default="the modules the --graph files name; a graph read from the store imports "
        "only from these",
    )
    p.set_defaults(handler=_serve)


def _token(args: argparse.Namespace) -> str | None:
    """The token given: --token-file's or --token's (not both), else $MAGISTRATE_TOKEN's."""
    if args.token is not None and args.token_file is not None:
        raise UsageError("give --token or --token-file, not both")
    if args.token_file is not None:
        try:
            lines = args.token_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--token-file {args.token_file}: cannot read it: {exc}") from exc
        token = lines[0].strip() if lines else ""
        if not token:
            raise UsageError(f"--token-file {args.token_file}: its first line is empty")
        return token
    return args.token or os.environ.get("MAGISTRATE_TOKEN") or None


async def _serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: expected 1..65535")
    token = _token(args)
    graphs = [load_graph(path) for path in args.graph]
    ids = [graph.id for graph in graphs]
    if len(set(ids)) != len(ids):
        raise UsageError(f"two --graph files have the same id: {', '.join(sorted(ids))}")
    allow = allowed_imports(args)
    if allow is None:
        allow = sorted({module for graph in graphs for module in imports_named(graph)})
    search_working_directory([*allow, *(t.partition(":")[0] for t in args.tools)])
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(args, create=True))
        llm_graph = next((g for g in graphs if any(n.kind == "llm" for n in g.nodes)), None)
        provider = None
        if llm_graph is not None or args.provider is not None:
            provider = await make_provider(args.provider, llm_graph, stack)
        tools = tools_from_modules(args.tools)
        async with Runtime(
            store,
            provider=provider,
            tools=tools,
            allow_imports=allow,
            metrics=default_metrics(),
        ) as rt:
            try:
                await serve(
                    rt,
                    graphs=graphs,
                    host=args.host,
                    port=args.port,
                    token=token,
                    read_token=args.read_token,
                    allowed_hosts=args.allowed_host,
                )
            except OSError as exc:  # it cannot listen: --host or --port is wrong here
                raise UsageError(str(exc)) from exc
            except ValueError as exc:  # beyond loopback without a token
                raise UsageError(str(exc)) from exc
    return EXIT_OK
