"""The ``magistrate`` command: argument parsing, dispatch, errors and exit codes.

Each command lives in a module with a ``register(subparsers)`` function that adds its
parsers and sets ``handler`` (an ``async def (args) -> int``); the table in ``_commands``
names each command's module and one-line help. Only the chosen command's module is
imported: ``magistrate --help`` reads the table alone, so start-up stays quick.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TextIO, cast

from ._commands import COMMANDS
from ._stdout import EXIT_STDOUT_FAILED, WatchedStdout

__all__ = ["build_parser", "main"]

# The options the command line takes before the command's name.
_GLOBAL_OPTIONS = frozenset({"--debug", "-h", "--help"})


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named on the command line, if any (its first word not an option)."""
    for word in argv:
        if word not in _GLOBAL_OPTIONS:
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: ``command``'s module registers its commands' full
    parsers; every other command is only listed with its help (all of them when
    ``command`` is None, which is enough for ``magistrate --help``)."""
    parser = argparse.ArgumentParser(
        prog="magistrate",
        description="Run judged agent graphs, and read, audit and steer their runs. Every "
        "command but graph takes --store (default: $MAGISTRATE_STORE, else magistrate.db).",
        epilog="exit codes: 0 completed (or the command succeeded), 1 failed, escalated or "
        "verification failed, 2 usage error or bad input, 3 paused, 4 cancelled",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks and the runtime's debug logs"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = COMMANDS[command][0] if command is not None else None
    registered: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if module != wanted:
            sub.add_parser(name, help=help_text)  # listed only: it is not the one chosen
        elif module not in registered:
            importlib.import_module(module).register(sub)
            registered.add(module)
    return parser


def _error(message: str) -> None:
    from ._printable import printable

    first, *rest = printable(str(message)).splitlines() or [""]
    sys.stderr.write(f"magistrate: error: {first}\n")
    for line in rest:
        sys.stderr.write(f"  {line.strip()}\n")


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    On a terminal, stdout shows a run's text as text (see ``_printable``). A stdout that
    cannot be written, whenever it fails (a write, or the flush at the command's end),
    ends the command as ``_stdout`` says: quietly when its reader went away."""
    _open_closed_streams()
    stdout = sys.stdout
    watched = WatchedStdout(stdout)
    sys.stdout = watched
    if stdout.isatty():
        from ._printable import PrintableStream

        sys.stdout = PrintableStream(cast(TextIO, watched))
    try:
        code = _main(argv, watched)
    except SystemExit:
        # argparse's --help (or its error). It ignores an error writing to stdout: the
        # watch has it. What it printed must reach stdout too: flushed here.
        if watched.failures:
            return watched.fail(watched.failures[-1])
        if watched.end(0) != 0:
            return EXIT_STDOUT_FAILED
        raise
    except Exception as exc:
        failure = watched.cause(exc)
        if failure is None:
            raise
        return watched.fail(failure)
    finally:
        sys.stdout = stdout
    return watched.end(code)


def _open_closed_streams() -> None:
    """Give a standard stream that was closed when the command started (``magistrate run
    G >&-``) the null device: what is written there is dropped, the command goes on, and
    no file it opens (a store) takes the stream's descriptor, where a write to the stream
    would land in it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: fd, or above
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))


def _main(argv: Sequence[str] | None, stdout: WatchedStdout) -> int:
    # The working directory is not put on sys.path: a module lying there must not shadow
    # an installed one. The modules a command may import from it are named to
    # search_working_directory (see _import_path) once the command knows them.
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_chosen(words)).parse_args(words)
    if not hasattr(args, "handler"):  # named in a way _chosen does not read ("-- runs")
        args = build_parser(args.command).parse_args(words)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.debug:
        # psycopg warns of each pipeline a lost connection breaks; the store itself says
        # what happened, once, and that it reconnects.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
    # Imported once a command is chosen: --help needs none of them.
    from actors import MagistrateError
    from eventstore import NotAStoreError, RunOwnedError, SchemaVersionError, StoreFileError

    from .. import MemoryValueError, RunChangedError, RunNotFoundError, RunStateError, SpecError
    from ._common import (
        EXIT_CANCELLED,
        EXIT_FAILED,
        EXIT_USAGE,
        Handler,
        UsageError,
    )
    from ._loop import run_command

    # Errors that mean "your input is wrong": exit 2 with the message, no traceback.
    usage_errors = (
        UsageError,
        SpecError,
        MemoryValueError,  # input the log cannot store as given: nothing was written
        RunNotFoundError,
        RunStateError,
        RunOwnedError,  # live in another process: pause or cancel it instead
        NotAStoreError,
        SchemaVersionError,
        StoreFileError,
    )
    handler: Handler = args.handler
    try:
        try:
            return run_command(handler, args)
        except BaseExceptionGroup as group:
            # A command's task group that failed for one reason: that reason, said as itself.
            leaves = _leaves(group)
            if len(leaves) != 1:
                raise
            raise leaves[0] from None
    except RunChangedError as exc:
        # A control that lost a race, or came after the run moved on: what happened.
        if args.debug:
            raise
        _error(str(exc))
        return EXIT_CANCELLED
    except usage_errors as exc:
        if args.debug:
            raise
        # Notes say where (a graph spec's problems: "in graph.yaml"): show them too.
        _error("\n".join([str(exc), *getattr(exc, "__notes__", ())]))
        return EXIT_USAGE
    except MagistrateError as exc:
        if args.debug:
            raise
        _error("\n".join([f"{type(exc).__name__}: {exc}", *getattr(exc, "__notes__", ())]))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as exc:
        # A stdout that could not be written (its reader went away: ``magistrate export
        # RUN | head``): main ends the command for it, --debug or not.
        if args.debug or stdout.cause(exc) is not None:
            raise
        _error(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return EXIT_FAILED
