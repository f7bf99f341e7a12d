"""``magistrate submit``: record a run of a graph file for the workers to execute.

Nothing of the graph runs here, and nothing it names is imported: no functions, tools,
judges or provider are needed in this process. The run is recorded running with no owner;
a ``magistrate worker`` (or an application's runtime with recovery) on the same store
claims it, checks that it can execute the graph (``--allow-imports`` there) and runs it.
"""

from __future__ import annotations

import argparse
from typing import Any

from eventstore import ConcurrencyError

from .. import Runtime, load_graph
from ..events import check_run_id
from ._commands import add_command
from ._common import (
    EXIT_OK,
    UsageError,
    add_output_option,
    add_store_option,
    emit_json,
    opened,
    parse_inputs,
    stdout_may_go,
    store_for,
)
from ._graph_id import check_graph_id

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_command(sub, "submit")
    p.add_argument("graph_file", metavar="GRAPH_FILE", help="a graph spec (YAML, TOML or JSON)")
    p.add_argument(
        "--input",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="an input value (repeatable; VALUE is JSON when it parses as JSON, else a string)",
    )
    p.add_argument(
        "--input-file",
        metavar="FILE",
        action="append",
        default=[],
        help="a JSON or YAML object of inputs (repeatable; --input values win)",
    )
    p.add_argument("--run-id", metavar="RUN", default=None, help="the new run's id")
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_submit)


async def _submit(args: argparse.Namespace) -> int:
    try:
        check_run_id(args.run_id)  # the library's rule, said as bad input
    except ValueError as exc:
        raise UsageError(f"--run-id: {exc}") from None
    graph = load_graph(args.graph_file)
    data = parse_inputs(args.input, args.input_file)
    unopened = await store_for(args, create=True)
    check_graph_id(graph, unopened, args.graph_file)  # before the store is created
    async with opened(unopened) as store, Runtime(store) as rt:
        try:
            run_id = await rt.submit(graph, input=data, run_id=args.run_id)
        except ConcurrencyError as exc:
            if exc.expected_seq != 0:
                raise
            raise UsageError(
                f"--run-id {args.run_id}: the store holds a run with that id already"
            ) from exc
    with stdout_may_go():  # recorded: a reader gone by now does not undo it
        if args.output == "json":
            emit_json({"run_id": run_id, "status": "running", "owner": None})
        else:
            print(f"run {run_id}: submitted, waiting for a worker")
    return EXIT_OK
