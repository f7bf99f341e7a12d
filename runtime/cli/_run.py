"""Commands that execute: ``run``, ``resume``, ``approve``, ``fork``, and the controls
``pause`` and ``cancel``.

Each runs the run in this process until it completes, fails, pauses or is cancelled,
showing its progress on stderr, then prints the result on stdout. SIGINT or SIGTERM
cancels the run (recorded in its log, so it never stays "running"); the exit code says
how it ended.
"""

from __future__ import annotations

import argparse
import getpass
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, NamedTuple

import anyio

from eventstore import CorruptLogError, EventStore, StoreError

from .. import (
    GraphChangeRefused,
    GraphSpec,
    LlmProvider,
    RunDrainingError,
    RunHandle,
    RunNotFoundError,
    RunResult,
    RunStateError,
    Runtime,
    SpecError,
    ToolRegistry,
    graph_from_dict,
    load_graph,
)
from ..reads import RunReader
from ._commands import add_command
from ._common import (
    ALLOW_IMPORTS_ENV,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PAUSED,
    UsageError,
    add_allow_imports_option,
    add_output_option,
    add_store_option,
    add_tools_option,
    allowed_imports,
    bounded_int,
    open_store,
    opened,
    parse_inputs,
    stdout_may_go,
    store_for,
    text_arg,
)
from ._graph_id import check_graph_id
from ._import_path import search_working_directory
from ._left import left_elsewhere
from ._progress import Progress, StderrConsole
from ._result import continue_command, print_result
from ._wiring import imports_named, make_provider, tools_from_modules

__all__ = ["exit_code", "register"]


def exit_code(result: RunResult) -> int:
    """0 completed cleanly; 1 failed, or completed degraded (a node failed or escalated on
    the way); 3 paused; 4 cancelled."""
    if result.status == "paused":
        return EXIT_PAUSED
    if result.status == "cancelled":
        return EXIT_CANCELLED
    if result.status == "completed" and result.quality == "clean":
        return EXIT_OK
    return EXIT_FAILED


def _execution_options(parser: argparse.ArgumentParser, *, imports_default: str) -> None:
    add_store_option(parser)
    add_output_option(parser)
    parser.add_argument(
        "--provider",
        metavar="P",
        help="the model: openai, anthropic or scripted:FILE (default: openai or anthropic "
        "when its API key is set; none for graphs without LLM nodes)",
    )
    add_tools_option(
        parser, note="; tools named 'module:attr' in the graph file are imported without it"
    )
    add_allow_imports_option(parser, default=imports_default)
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="no progress on stderr, only the result"
    )


def _input_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--input",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help=f"{what} (repeatable; VALUE is JSON when it parses as JSON, else a string)",
    )


# A graph read from a store is data someone else may have written: it imports nothing
# unless the command line (or the environment) allows it.
_STORED = "none: a graph read from the store imports only what this allows"


def register(sub: Any) -> None:
    p = add_command(sub, "run")
    p.add_argument("graph_file", metavar="GRAPH_FILE", help="a graph spec (YAML, TOML or JSON)")
    _input_options(p, "an input value")
    p.add_argument(
        "--input-file",
        metavar="FILE",
        action="append",
        default=[],
        help="a JSON or YAML object of inputs (repeatable; --input values win)",
    )
    _execution_options(p, imports_default="the modules the graph file names, as a script's")
    p.set_defaults(handler=_run)

    p = add_command(sub, "resume")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    _input_options(p, "a value to inject first")
    p.add_argument(
        "--graph",
        metavar="FILE",
        help="move the run to this graph first, if its replay against it diverges nowhere "
        "(trusted as run FILE is: its modules may be imported)",
    )
    p.add_argument(
        "--force", action="store_true", help="with --graph: move it even if the replay diverged"
    )
    _execution_options(p, imports_default=_STORED)
    p.set_defaults(handler=_resume)

    p = add_command(
        sub,
        "approve",
    )
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    p.add_argument("--by", type=_who, help="who approves (default: the OS user's name)")
    p.add_argument(
        "--reject",
        metavar="REASON",
        type=text_arg,
        default=None,
        help="reject the gate instead, saying why (final: the node's on_failure edge "
        "fires, else the run ends cancelled)",
    )
    p.add_argument(
        "--expected-seq",
        type=bounded_int(1),
        metavar="SEQ",
        help="the run's last seq as you saw it (show, state): a run that moved on since is "
        "refused (exit 4), nothing recorded",
    )
    _input_options(p, "a value the approval puts into memory")
    _execution_options(p, imports_default=_STORED)
    p.set_defaults(handler=_approve)

    p = add_command(sub, "fork")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    p.add_argument(
        "--at", type=bounded_int(1), required=True, metavar="SEQ", help="copy seqs 1..SEQ"
    )
    _input_options(p, "a value to inject into the new run")
    _execution_options(p, imports_default=_STORED)
    p.set_defaults(handler=_fork)


async def _graph_of(
    store: EventStore, run_id: str, at_seq: int | None = None
) -> tuple[GraphSpec, list[str], str]:
    """The run's graph, the nodes it would run next (at ``at_seq``) and its status there.

    Raises CorruptLogError when the read's hash chain is broken: a broken log is not run.
    """
    reader = RunReader(store)
    try:
        view = await reader.state(run_id, at_seq=at_seq)
    except ValueError:  # a seq past the log: the fork itself says so
        view = await reader.state(run_id)
    if not view.chain.ok:
        chain = view.chain
        raise CorruptLogError(run_id, chain.broken_at or 0, chain.reason or "broken chain")
    state = view.state
    if state.graph is None:
        raise RunNotFoundError(run_id)
    resume_at = [*state.pending, *state.running]
    return graph_from_dict(state.graph, validate=False), resume_at, state.status


class _Wiring(NamedTuple):
    """What a run needs besides its store: the model, the tools, the imports allowed."""

    provider: LlmProvider | None
    tools: ToolRegistry
    allow: list[str]


async def _wire(
    args: argparse.Namespace,
    graph: GraphSpec | None,
    stack: AsyncExitStack,
    resume_at: list[str] | None = None,
    *,
    allow: list[str],
    recorded: str | None = None,
) -> _Wiring:
    """The provider ``--provider`` names and the tools ``--tools`` names, opened on
    ``stack``: a UsageError for either comes before the store is opened where the graph
    is known without it (``run``), so a refused command creates no store.

    ``allow`` lists the module prefixes the run may import from: they and the ``--tools``
    modules may also come from the working directory. ``recorded``: see :func:`_execute`
    (an approval is recorded even where no model can be made here)."""
    search_working_directory([*allow, *(t.partition(":")[0] for t in args.tools)])
    try:
        provider = await make_provider(args.provider, graph, stack, start=resume_at)
    except UsageError:
        if recorded is None:
            raise
        provider = None  # an approval is recorded even where the run cannot go on
    return _Wiring(provider, tools_from_modules(args.tools), allow)


async def _execute(
    args: argparse.Namespace,
    graph: GraphSpec | None,
    start: Callable[[Runtime], Awaitable[RunHandle | None]],
    store: EventStore,
    wiring: _Wiring,
    *,
    stored: bool = True,
    recorded: str | None = None,
) -> int:
    """Open a runtime on ``store`` as ``wiring`` says, start the run with ``start``, follow
    it to its end.

    ``stored``: the graph was read from the store (not a file named on the command line).
    ``recorded`` (an approval's, naming who decided): ``start`` records a decision and may
    leave the run to another process (it returns None), for example when no model or
    import is allowed here; this says so. Once the run ended as recorded, a reader of
    stdout that went away changes nothing: the exit code is the run's."""
    provider, tools, allow = wiring
    console = StderrConsole()
    began = time.monotonic()
    with Progress(console, quiet=args.quiet, where=f"store {_store_name(store)}") as progress:
        async with Runtime(
            store, provider=provider, tools=tools, hooks=[progress.hook], allow_imports=allow
        ) as rt:
            # Signals are taken from before the start on: the run's first events (and
            # the progress lines they print) are committed before ``start`` returns.
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                try:
                    handle = await start(rt)
                except SpecError as exc:
                    if stored:
                        exc.add_note(
                            "the graph comes from the store: it imports only from what "
                            f"--allow-imports PREFIX (or ${ALLOW_IMPORTS_ENV}) lists"
                        )
                    raise
                if handle is None:
                    assert recorded is not None
                    with stdout_may_go():
                        await left_elsewhere(args, rt, graph, recorded, allow)
                    return EXIT_OK  # the decision is recorded
                result, interrupted = await _follow(rt, handle, signals)
    with stdout_may_go():
        print_result(args, result, time.monotonic() - began, allow)
    if interrupted is not None and result.status == "cancelled":
        # Where a person pressed Ctrl-C: what became of the run, and the way back.
        sys.stderr.write(
            f"magistrate: run {result.run_id} cancelled by {interrupted}, its log kept; "
            f"continue it with: {continue_command(args, 'resume', result.run_id, allow)}\n"
        )
    return exit_code(result)


def _store_name(store: EventStore) -> str:
    return str(getattr(store, "path", type(store).__name__))


async def _follow(
    rt: Runtime, handle: RunHandle, signals: AsyncIterator[signal.Signals]
) -> tuple[RunResult, str | None]:
    """Wait for the run's result, and the name of the signal that interrupted it if one
    did: SIGINT or SIGTERM cancels it (a second one stops waiting)."""
    interrupted: str | None = None
    async with anyio.create_task_group() as tg:

        async def on_signals() -> None:
            nonlocal interrupted
            async for signum in signals:
                interrupted = name = signal.Signals(signum).name
                await rt.cancel(handle.run_id, reason=f"interrupted by {name}")
                break
            async for _ in signals:
                raise KeyboardInterrupt

        tg.start_soon(on_signals)
        try:
            result = await handle.result()
        except StoreError as exc:
            # The store stopped taking the run's events (a full disk, a size limit): the
            # run stands where its last commit left it. Its subclasses (a conflict, a
            # lost lease) say themselves who holds the run.
            if type(exc) is StoreError:
                exc.add_note(
                    f"run {handle.run_id} keeps what was committed before this error; once "
                    f"the store takes writes again, 'magistrate resume {handle.run_id}' "
                    "continues it"
                )
            raise
        tg.cancel_scope.cancel()
    return result, interrupted


async def _run(args: argparse.Namespace) -> int:
    graph = load_graph(args.graph_file)
    data = parse_inputs(args.input, args.input_file)
    appended = {key.name for key in graph.memory if key.reducer == "append"}
    entry = graph.node(graph.entry_node)
    missing = [k for k in entry.input_keys if k not in data and k not in appended]
    allow = allowed_imports(args)
    allow = imports_named(graph) if allow is None else allow
    async with AsyncExitStack() as stack:
        # Everything that can be refused is, before the store is opened (or created).
        unopened = await store_for(args, create=True)
        check_graph_id(graph, unopened, args.graph_file)
        wiring = await _wire(args, graph, stack, allow=allow)
        try:
            Runtime(provider=wiring.provider, tools=wiring.tools, allow_imports=allow).nodes.check(
                graph
            )
        except SpecError as exc:
            exc.add_note(f"in {args.graph_file}")
            raise
        store = await stack.enter_async_context(opened(unopened))

        async def start(rt: Runtime) -> RunHandle:
            if missing:  # a warning: a node may do without a key it reads (inputs.get)
                sys.stderr.write(
                    f"magistrate: warning: the entry node '{entry.id}' reads "
                    f"{', '.join(missing)}, which no --input gives (--input {missing[0]}=VALUE)\n"
                )
            return await rt.start(graph, input=data)

        return await _execute(args, graph, start, store, wiring, stored=False)


async def _resume(args: argparse.Namespace) -> int:
    if args.force and not args.graph:
        raise UsageError("--force goes with --graph FILE")
    new = load_graph(args.graph) if args.graph else None
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(args))
        graph, resume_at, _ = await _graph_of(store, args.run_id)
        allow = allowed_imports(args)
        if new is not None:  # a file named here is trusted as run FILE's is
            check_graph_id(new, store, args.graph)
            graph, allow = new, imports_named(new) if allow is None else allow

        async def start(rt: Runtime) -> RunHandle:
            data = parse_inputs(args.input) or None
            return await rt.resume(args.run_id, input=data, graph=new, force=args.force)

        wiring = await _wire(args, graph, stack, resume_at, allow=allow or [])
        try:
            return await _execute(args, graph, start, store, wiring, stored=new is None)
        except GraphChangeRefused as exc:
            sys.stderr.write(f"magistrate: {exc}\n")
            for d in exc.report.divergences:
                sys.stderr.write(f"  seq {d.seq} {d.kind}: {d.reason}\n")
            return EXIT_FAILED
        except RunStateError as exc:
            if exc.status != "paused" or isinstance(exc, RunDrainingError):
                raise
            # Waiting at a gate: only an approval passes it, and the run stays as it was.
            sys.stderr.write(f"magistrate: {exc}\n")
            return EXIT_PAUSED


def _who(text: str) -> str:
    """``--by``: a name (Runtime.approve refuses one of spaces only)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"names nobody: {text!r}")
    return text_arg(text)


async def _approve(args: argparse.Namespace) -> int:
    data = parse_inputs(args.input)
    by = args.by or _os_user() or "unknown"
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(args))
        graph, resume_at, _ = await _graph_of(store, args.run_id)

        async def start(rt: Runtime) -> RunHandle | None:
            seen = args.expected_seq
            if args.reject is not None:
                return await rt.reject(args.run_id, by=by, reason=args.reject, expected_seq=seen)
            return await rt.approve(args.run_id, input=data, by=by, expected_seq=seen)

        allow = allowed_imports(args) or []
        wiring = await _wire(args, graph, stack, resume_at, allow=allow, recorded=by)
        try:
            return await _execute(args, graph, start, store, wiring, recorded=by)
        except RunStateError as exc:
            if type(exc) is RunStateError and exc.status == "running":
                exc.add_note(await _going_on(args, store, imports_named(graph)))
            raise


async def _going_on(args: argparse.Namespace, store: EventStore, modules: list[str]) -> str:
    """What goes on with a running run an approval found at no gate (approved before,
    most likely, by a process that could not execute it)."""
    summary = await RunReader(store).summary(args.run_id)
    if summary.owner:
        return f"{summary.owner} executes it"
    return (
        f"nothing executes it now: {continue_command(args, 'resume', args.run_id, modules)} "
        "continues it here (or a magistrate worker that may run it)"
    )


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in the environment or the user database
        return None


async def _fork(args: argparse.Namespace) -> int:
    data = parse_inputs(args.input)
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(args))
        graph, resume_at, _ = await _graph_of(store, args.run_id, at_seq=args.at)

        async def start(rt: Runtime) -> RunHandle:
            return await rt.fork(args.run_id, args.at, input=data or None)

        allow = allowed_imports(args) or []
        wiring = await _wire(args, graph, stack, resume_at, allow=allow)
        return await _execute(args, graph, start, store, wiring)
