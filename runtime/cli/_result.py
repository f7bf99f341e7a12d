"""What the commands that execute print once the run stops: its result, and for a paused
run the command that continues it."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from eventstore import heads_path_beside

from .. import RunResult
from ._common import counted, emit_json, store_url, to_builtins

__all__ = ["continue_command", "print_result"]


def print_result(
    args: argparse.Namespace, result: RunResult, elapsed: float, allow: list[str]
) -> None:
    if args.output == "json":
        data = to_builtins(result)
        data["elapsed_seconds"] = round(elapsed, 3)
        emit_json(data)
        return
    quality = f", quality {result.quality}" if result.quality else ""
    lines = [
        f"run {result.run_id}: {result.status}{quality} after {counted(result.steps, 'step')}, "
        f"{counted(result.total_retries, 'node retry', 'node retries')}, {elapsed:.1f}s"
    ]
    if result.error:
        lines.append(f"error: {result.error}")
    if result.status == "paused":
        command = "approve" if result.paused_reason == "hitl" else "resume"
        lines.append(
            f"paused ({result.paused_reason}) before {', '.join(result.resume_at) or '-'}; "
            f"continue with: {continue_command(args, command, result.run_id, allow)}"
        )
    lines.append("memory:")
    for key, value in result.memory.items():
        lines.append(f"  {key}: {_show(value)}")
    sys.stdout.write("\n".join(lines) + "\n")


def continue_command(args: argparse.Namespace, command: str, run_id: str, allow: list[str]) -> str:
    """The command that continues a paused run: the graph comes back from the store, so it
    imports only what ``--allow-imports`` names (what this run was allowed), from the same
    store (a PostgreSQL URL is not repeated: it may hold a password), with the same heads
    file when ``--heads`` named one other than the store's own."""
    words = ["magistrate", command, run_id]
    if command == "approve":
        words.append("[--input KEY=VALUE]")
    if args.store:
        secret = args.store.lower().startswith(("postgresql:", "postgres:"))
        words += ["--store", "URL" if secret else shlex.quote(args.store)]
    heads = getattr(args, "heads", None)
    if heads and heads != heads_path_beside(store_url(args)):
        words += ["--heads", shlex.quote(heads)]
    if allow:
        words += ["--allow-imports", ",".join(allow)]
    return " ".join(words)


def _show(value: Any) -> str:
    import msgspec

    if isinstance(value, str):
        return value if "\n" not in value else "\n    " + value.replace("\n", "\n    ")
    return msgspec.json.encode(to_builtins(value)).decode()
