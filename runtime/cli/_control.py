"""The controls that only append: ``pause`` and ``cancel`` (of a run here or live in
another process). They import no graph and run nothing. What they print comes after the
control is recorded: a reader of stdout that went away by then changes nothing, and the
exit code says what was done (a script must not do it again)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import Runtime
from ..events import RunState
from ._commands import add_command
from ._common import (
    EXIT_OK,
    add_output_option,
    add_store_option,
    emit_json,
    open_store,
    stdout_may_go,
    text_arg,
)

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_command(sub, "pause")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_pause)

    p = add_command(sub, "cancel")
    p.add_argument("run_id", metavar="RUN", type=text_arg)
    p.add_argument(
        "--reason",
        type=text_arg,
        default="cancelled from the command line",
        help="why, recorded in the run.cancelled event (default: cancelled from the command line)",
    )
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_cancel)


async def _pause(args: argparse.Namespace) -> int:
    async with open_store(args) as store, Runtime(store) as rt:
        await rt.pause(args.run_id)
        state = await rt.get_state(args.run_id)
    return _control_answer(args, state)


async def _cancel(args: argparse.Namespace) -> int:
    async with open_store(args) as store, Runtime(store) as rt:
        await rt.cancel(args.run_id, reason=args.reason)
        state = await rt.get_state(args.run_id)
    return _control_answer(args, state)


def _control_answer(args: argparse.Namespace, state: RunState) -> int:
    """What a control command prints: the run's status and seq once it is recorded (a
    pause of a run live elsewhere is requested: its owner pauses it at its next node
    boundary)."""
    requested = state.pause_requested
    with stdout_may_go():  # recorded: a reader gone by now does not undo it
        if args.output == "json":
            emit_json(
                {
                    "run_id": args.run_id,
                    "status": state.status,
                    "seq": state.last_seq,
                    "pause_requested": requested,
                }
            )
        else:
            note = "; pause requested: it pauses at its next node boundary" if requested else ""
            sys.stdout.write(f"run {args.run_id}: {state.status}{note} (seq {state.last_seq})\n")
    return EXIT_OK
