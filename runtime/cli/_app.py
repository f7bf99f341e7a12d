"""The ``magistrate`` command: argument parsing, dispatch, errors and exit codes.

Each command lives in a module with a ``register(subparsers)`` function that adds its
parsers and sets ``handler`` (an ``async def (args) -> int``). Adding a command is a new
module and one line in :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

import anyio

from actors import MagistrateError
from eventstore import NotAStoreError, SchemaVersionError, StoreFileError

from .. import RunChangedError, RunNotFoundError, RunStateError, SpecError
from ._common import EXIT_CANCELLED, EXIT_FAILED, EXIT_USAGE, Handler, UsageError

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: The modules whose ``register`` adds commands, in the order ``--help`` lists them.
COMMAND_MODULES: Final = (
    "runtime.cli._run",
    "runtime.cli._read",
    "runtime.cli._audit",
    "runtime.cli._serve",
    "runtime.cli._worker",
)

# Errors that mean "your input is wrong": exit 2 with the message, no traceback.
_USAGE_ERRORS = (
    UsageError,
    SpecError,
    RunNotFoundError,
    RunStateError,
    NotAStoreError,
    SchemaVersionError,
    StoreFileError,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (each command module registers its own)."""
    parser = argparse.ArgumentParser(
        prog="magistrate",
        description="Run judged agent graphs, and read, audit and steer their runs. Every "
        "command takes --store (default: $MAGISTRATE_STORE, else magistrate.db).",
        epilog="exit codes: 0 completed (or the command succeeded), 1 failed, escalated or "
        "verification failed, 2 usage error or bad input, 3 paused, 4 cancelled (or a "
        "control that found the run already cancelled, finished or paused by another writer)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks and the runtime's debug logs"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _error(message: str) -> None:
    first, *rest = str(message).splitlines() or [""]
    sys.stderr.write(f"magistrate: error: {first}\n")
    for line in rest:
        sys.stderr.write(f"  {line.strip()}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    # The working directory is not put on sys.path: a module lying there must not shadow
    # an installed one. The modules a command may import from it are named to
    # search_working_directory (see _import_path) once the command knows them.
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler: Handler = args.handler
    try:
        return anyio.run(handler, args)
    except RunChangedError as exc:
        # A control that lost a race, or came after the run moved on: what happened.
        if args.debug:
            raise
        _error(str(exc))
        return EXIT_CANCELLED
    except _USAGE_ERRORS as exc:
        if args.debug:
            raise
        # Notes say where (a graph spec's problems: "in graph.yaml"): show them too.
        _error("\n".join([str(exc), *getattr(exc, "__notes__", ())]))
        return EXIT_USAGE
    except MagistrateError as exc:
        if args.debug:
            raise
        _error(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILED
    except BrokenPipeError:
        # The reader went away (``magistrate export RUN | head``): no traceback, and no
        # second error when the interpreter flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as exc:
        if args.debug:
            raise
        _error(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return EXIT_FAILED
