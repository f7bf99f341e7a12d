"""The table of commands: each command's name, its one-line help and the module that
registers its parser and runs it.

``magistrate --help`` is built from this table alone, and a command's own module is
imported only when that command is chosen, so start-up loads the engine, the stores, the
HTTP server or the terminal renderer only for the commands that use them.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

__all__ = ["COMMANDS", "add_command"]

_RUN: Final = "runtime.cli._run"
_READ: Final = "runtime.cli._read"
_SHOW: Final = "runtime.cli._show"
_AUDIT: Final = "runtime.cli._audit"
_CONTROL: Final = "runtime.cli._control"

#: name -> (module, one-line help), in the order ``--help`` lists them. A module's
#: ``register(subparsers)`` adds the parsers of its commands with :func:`add_command`.
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "run": (_RUN, "run a graph file, showing its progress"),
    "submit": (
        "runtime.cli._submit",
        "record a run of a graph file for the workers to execute (nothing of it runs or is "
        "imported here)",
    ),
    "resume": (_RUN, "resume a paused, cancelled or interrupted run (a gate needs approve)"),
    "approve": (
        _RUN,
        "approve (or reject) the gate a paused run waits at, then run it here if this "
        "process can execute its graph",
    ),
    "fork": (_RUN, "start a new run from a copy of a run's first SEQ events, then run it"),
    "pause": (_CONTROL, "pause a running run, here or in another process"),
    "cancel": (_CONTROL, "cancel a run: running here or in another process, paused or interrupted"),
    "runs": (_READ, "list runs, newest first"),
    "show": (
        _SHOW,
        "a run's status, owner, path, gate decisions, failed nodes, verdicts, tokens and "
        "chain check",
    ),
    "timeline": (_SHOW, "a run's audit timeline, with its hash chain verified"),
    "state": (_READ, "a run's state (the fold of its log), now or at a seq"),
    "export": (_READ, "a run's events as JSON lines, one event per line"),
    "graph": (_READ, "a graph file as a Mermaid flowchart"),
    "verify": (_AUDIT, "check runs' hash chains (and kept heads)"),
    "heads": (_AUDIT, "each finished run's last seq and chain hash, to keep outside the store"),
    "replay": (
        "runtime.cli._replay",
        "run recorded runs again against a graph: what would it decide otherwise?",
    ),
    "serve": ("runtime.cli._serve", "serve the HTTP API and the web dashboard"),
    "worker": (
        "runtime.cli._worker",
        "execute runs submitted to the store by any process (Runtime.submit), until "
        "stopped; also takes over runs whose owner died",
    ),
}


def add_command(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of command ``name``, with the help the table gives it."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=COMMANDS[name][1], **kwargs)
    return parser
