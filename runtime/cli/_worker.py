"""The ``worker`` command: execute runs that any process submitted to the store."""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio

from .. import LlmProvider, Runtime, run_worker
from ..observe import default_metrics, serve_metrics
from ._commands import add_command
from ._common import (
    EXIT_OK,
    UsageError,
    add_allow_imports_option,
    add_store_option,
    add_tools_option,
    allowed_imports,
    bounded_int,
    open_store,
    text_arg,
)
from ._import_path import search_working_directory
from ._wiring import make_provider, tools_from_modules

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_command(
        sub,
        "worker",
    )
    add_store_option(p)
    p.add_argument(
        "--concurrency",
        type=bounded_int(1),
        default=10,
        metavar="N",
        help="live runs at most (default 10)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how long a claim holds without renewal (renewed every third of it; default 15)",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often to look for runnable runs besides the store's NOTIFY (default 0.5)",
    )
    p.add_argument(
        "--worker-id",
        type=text_arg,
        default=None,
        help="this worker's name (default host:pid:random)",
    )
    p.add_argument(
        "--provider",
        metavar="P",
        help="the model for LLM nodes: openai, anthropic or scripted:FILE (default: openai or "
        "anthropic when its API key is set, else none)",
    )
    add_tools_option(p)
    add_allow_imports_option(
        p, default="none: a run whose graph imports from elsewhere is left to other workers"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve this process's Prometheus metrics on http://HOST:PORT/metrics (0: any "
        "free port, printed at start; default: no metrics)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the metrics endpoint binds (default: 127.0.0.1)",
    )
    p.set_defaults(handler=_worker)


async def _provider(option: str | None, stack: AsyncExitStack) -> LlmProvider | None:
    if option is None:
        if os.environ.get("OPENAI_API_KEY"):
            option = "openai"
        elif os.environ.get("ANTHROPIC_API_KEY"):
            option = "anthropic"
        else:
            return None
    return await make_provider(option, None, stack)


async def _worker(args: argparse.Namespace) -> int:
    """Run until SIGINT or SIGTERM; then live runs stop and their claims are released."""
    if not all(math.isfinite(v) and v > 0 for v in (args.lease, args.poll)):
        raise UsageError(
            f"--lease and --poll must be finite and positive, got {args.lease}, {args.poll}"
        )
    if args.metrics_port is not None and not 0 <= args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port}: expected 0..65535")
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(args, create=True))
        allow = allowed_imports(args) or []
        search_working_directory([*allow, *(t.partition(":")[0] for t in args.tools)])
        provider = await _provider(args.provider, stack)
        tools = tools_from_modules(args.tools)
        metrics = None
        if args.metrics_port is not None:
            metrics = default_metrics()
            try:
                server = serve_metrics(args.metrics_port, host=args.metrics_host)
            except OSError as exc:  # it cannot listen: --metrics-host or --metrics-port
                raise UsageError(f"--metrics-port {args.metrics_port}: {exc}") from exc
            stack.callback(server.close)
            sys.stderr.write(f"metrics on {server.url}\n")

        def ready(runtime: Runtime) -> None:
            sys.stderr.write(f"worker {runtime.worker_id} ready\n")
            sys.stderr.flush()

        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: run_worker(
                        store,
                        concurrency=args.concurrency,
                        worker_id=args.worker_id,
                        lease_seconds=args.lease,
                        poll_interval=args.poll,
                        on_ready=ready,
                        provider=provider,
                        tools=tools,
                        allow_imports=allow,
                        metrics=metrics,
                    )
                )
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    break
    return EXIT_OK
