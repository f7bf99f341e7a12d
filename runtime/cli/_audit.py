"""Audit commands: ``verify`` (hash chains, snapshots, and heads kept outside the store) and
``heads``.

A hash chain proves that no stored event was edited, dropped from the middle or
reordered, but not that the log still holds everything it acknowledged: a log cut after
its last good event, or rechained consistently, still chains. Two references catch that:
the store's heads file (each run's head recorded by its owner when it paused or ended,
see eventstore.HeadsFile), which ``verify`` reads when the store keeps one, and
``heads``, which prints each run's last seq and chain hash for an auditor to keep
elsewhere, for ``verify --against``. Each kept head must still be in the log with the
same hash, which a lost tail or a rechained log cannot pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import msgspec

from eventstore import (
    EventStore,
    HeadsFileContents,
    RecordedHead,
    RunInfo,
    StoreFileError,
)

from .. import RunNotFoundError
from ..reads import RunReader
from ._commands import add_command
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    MAX_INT,
    UsageError,
    add_output_option,
    add_store_option,
    counted,
    emit_json,
    open_store,
    text_arg,
)

__all__ = ["Head", "read_heads", "register"]

_FINISHED = ("completed", "failed", "cancelled")


class Head(msgspec.Struct, frozen=True):
    """A run's last seq and the chain hash of that event."""

    run_id: str
    seq: Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
    hash: str


class Problem(msgspec.Struct, frozen=True):
    run_id: str
    seq: int | None
    reason: str


def register(sub: Any) -> None:
    p = add_command(sub, "verify")
    p.add_argument("run_id", metavar="RUN", type=text_arg, nargs="?", help="the run to check")
    p.add_argument("--all", action="store_true", help="check every run in the store")
    p.add_argument(
        "--against",
        metavar="HEADS",
        help="a file written by 'magistrate heads': each head must still be in the log",
    )
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_verify)

    p = add_command(sub, "heads")
    p.add_argument(
        "--all", action="store_true", help="every run, also those still running or paused"
    )
    add_store_option(p)
    add_output_option(p)
    p.set_defaults(handler=_heads)


async def _all_runs(store: EventStore) -> list[RunInfo]:
    # Page by page along the listing's cursor (each page one index scan).
    runs: list[RunInfo] = []
    cursor: str | None = None
    while True:
        page = await store.query_runs(cursor=cursor, limit=1000)
        runs += page.runs
        if page.next_cursor is None:
            return runs
        cursor = page.next_cursor


async def _head(store: EventStore, info: RunInfo) -> Head | None:
    last = None
    async for event in store.read(info.run_id, from_seq=max(1, info.last_seq)):
        last = event
    return None if last is None else Head(info.run_id, last.seq, last.hash)


async def _heads(args: argparse.Namespace) -> int:
    async with open_store(args, heads="unused") as store:
        heads: list[Head] = []
        for info in await _all_runs(store):
            if args.all or info.status in _FINISHED:
                head = await _head(store, info)
                if head is not None:
                    heads.append(head)
    if args.output == "json":
        emit_json(heads)
    else:
        sys.stdout.write("".join(f"{h.run_id} {h.seq} {h.hash}\n" for h in heads))
    return EXIT_OK


def read_heads(path: str) -> list[Head]:
    """Heads from a file in either output of ``heads``: ``RUN SEQ HASH`` lines, or JSON
    (an array of objects, or one object per line). Raises UsageError for anything else."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read heads file {path}: {exc.strerror or exc}") from exc
    try:
        stripped = raw.decode("utf-8").strip()  # a UnicodeDecodeError is a ValueError
        if stripped.startswith("["):
            return msgspec.convert(json.loads(stripped), list[Head])
        heads = []
        for number, line in enumerate(stripped.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.lstrip().startswith("{"):
                heads.append(msgspec.convert(json.loads(line), Head))
                continue
            parts = line.split()
            if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) > MAX_INT:
                raise UsageError(f"heads file {path}, line {number}: expected 'RUN SEQ HASH'")
            heads.append(Head(parts[0], int(parts[1]), parts[2]))
        return heads
    except (ValueError, msgspec.ValidationError, RecursionError) as exc:  # deep: recursion
        raise UsageError(f"heads file {path} is not valid: {exc}") from exc


def _damaged(exc: StoreFileError) -> bool:
    """Whether SQLite found the store's file cut short or damaged (a failed verification),
    rather than being kept from reading it (locked, or not upgraded: exit 2)."""
    name = str(getattr(exc.__cause__, "sqlite_errorname", ""))
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


async def _verify(args: argparse.Namespace) -> int:
    if (args.run_id is None) == (not args.all):
        raise UsageError("verify takes a RUN or --all (exactly one of them)")
    problems: list[Problem] = []
    checked: list[dict[str, Any]] = []
    kept_elsewhere = read_heads(args.against) if args.against else []
    heads = [h for h in kept_elsewhere if args.run_id in (None, h.run_id)]
    recorded: HeadsFileContents | None = None
    newest: dict[str, RecordedHead] = {}
    try:
        async with open_store(args, heads="check") as store:
            if args.all:
                run_ids = [info.run_id for info in await _all_runs(store)]
            else:
                if await store.get_run(args.run_id) is None:
                    raise RunNotFoundError(args.run_id)
                run_ids = [args.run_id]
            reader = RunReader(store)
            # The store's heads file: verify checks each run against every head recorded
            # there; here, its own break and (with --all) the runs it names the store lost.
            try:
                recorded = await reader.heads_file()
            except OSError as exc:
                raise UsageError(
                    f"heads file {exc.filename}: it cannot be read: {exc.strerror or exc}"
                ) from exc
            if recorded is not None and not recorded.ok:
                problems.append(
                    Problem(
                        f"heads file {recorded.path}",
                        None,
                        f"line {recorded.broken_line}: {recorded.reason}",
                    )
                )
            for run_id in run_ids:
                report = await reader.verify(run_id)
                checked.append({"run_id": run_id, "ok": report.ok, "events": report.checked})
                if not report.ok:
                    problems.append(Problem(run_id, report.broken_at, report.reason or "broken"))
            newest = {} if recorded is None else recorded.newest()
            if args.all:
                listed = set(run_ids)
                heads += [
                    Head(h.run_id, h.seq, h.hash) for h in newest.values() if h.run_id not in listed
                ]
            for head in heads:
                reason = await reader.check_head(head.run_id, head.seq, head.hash)
                if reason is not None:
                    problems.append(Problem(head.run_id, head.seq, reason))
    except StoreFileError as exc:
        if not _damaged(exc):
            raise
        # A file SQLite finds cut short or damaged fails verification, met where it may
        # be (opening it, listing its runs, finding the run), as in a run's events.
        problems.append(
            Problem(f"store {exc.path}", None, f"the file cannot be read: {exc.reason}")
        )
    ok = not problems
    kept = len([h for h in newest.values() if args.all or h.run_id == args.run_id])
    if args.output == "json":
        emit_json(
            {
                "ok": ok,
                "runs": checked,
                "heads": len(heads),
                "recorded_heads": kept,
                "heads_file": None if recorded is None else recorded.path,
                "problems": problems,
            }
        )
    else:
        for problem in problems:
            at = f" at seq {problem.seq}" if problem.seq is not None else ""
            sys.stdout.write(f"FAILED {problem.run_id}{at}: {problem.reason}\n")
        events = sum(c["events"] for c in checked)
        against = f", {counted(len(heads), 'kept head')} present" if args.against and ok else ""
        if recorded is not None and ok:
            against += f", {counted(kept, 'recorded head')} present"
        verdict = "ok" if ok else counted(len(problems), "problem")
        sys.stdout.write(
            f"{verdict}: {counted(len(checked), 'run')}, {counted(events, 'event')} checked"
            f"{against}\n"
        )
    return EXIT_OK if ok else EXIT_FAILED
