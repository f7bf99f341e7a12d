"""What every command shares: store URLs, input parsing, output modes, exit codes, errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import anyio
import msgspec

from actors import MagistrateError
from eventstore import EventStore, StoreMissingError, StoreUnreachableError, heads_path_beside
from eventstore import open_store as eventstore_open

from ._printable import printable
from ._stdout import dropped

__all__ = [
    "ALLOW_IMPORTS_ENV",
    "DEFAULT_STORE",
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_USAGE",
    "HEADS_ENV",
    "MAX_INT",
    "Handler",
    "HeadsUse",
    "UsageError",
    "add_allow_imports_option",
    "add_output_option",
    "add_store_option",
    "allowed_imports",
    "bounded_int",
    "counted",
    "discard_stdout",
    "emit_json",
    "heads_path",
    "open_store",
    "opened",
    "parse_inputs",
    "read_file",
    "stdout_may_go",
    "store_for",
    "store_url",
    "text_arg",
    "to_builtins",
]

#: The environment variable that stands for ``--allow-imports`` (comma-separated prefixes).
ALLOW_IMPORTS_ENV: Final = "MAGISTRATE_ALLOW_IMPORTS"

#: The environment variable that stands for ``--heads`` (the path of the heads file).
HEADS_ENV: Final = "MAGISTRATE_HEADS"

#: The store used when neither ``--store`` nor ``MAGISTRATE_STORE`` names one.
DEFAULT_STORE: Final = "magistrate.db"

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_PAUSED: Final = 3
EXIT_CANCELLED: Final = 4

#: A command: gets the parsed arguments, returns the exit code.
Handler = Callable[[argparse.Namespace], Awaitable[int]]

Output = Literal["text", "json"]


class UsageError(MagistrateError):
    """Bad command-line input (exit code 2); the message is the one line shown."""


#: The largest seq or count a store takes (SQLite's and PostgreSQL's 64-bit integers).
MAX_INT: Final = 2**63 - 1


def bounded_int(low: int, high: int = MAX_INT) -> Callable[[str], int]:
    """An argparse ``type``: a whole number from ``low`` to ``high`` (else exit 2 naming
    the option and the bounds, before anything is opened)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value

    return parse


def text_arg(text: str) -> str:
    """An argparse ``type`` for a name or reason the store keeps or looks up: a word of
    the command line that is not UTF-8 (its bytes decode to lone surrogates, which no
    store takes) is refused, exit 2, before anything is opened."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"not UTF-8 text: {text!r}") from None
    return text


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help=f"the event store: a SQLite file path, sqlite:///PATH or postgresql://... "
        f"(default: $MAGISTRATE_STORE, else {DEFAULT_STORE} in the working directory)",
    )
    parser.add_argument(
        "--heads",
        metavar="PATH",
        default=None,
        help=f"the store's heads file, where each run's head is recorded when it pauses or "
        f"ends and which verify checks ('none' for no file; default: ${HEADS_ENV}, else "
        "the store's path plus .heads for a SQLite store, none for PostgreSQL)",
    )


def add_tools_option(parser: argparse.ArgumentParser, *, note: str = "") -> None:
    """``--tools MODULE[:ATTR]`` (repeatable), for the commands that run graphs."""
    parser.add_argument(
        "--tools",
        metavar="MODULE[:ATTR]",
        action="append",
        default=[],
        help="register the tools of a module, list or registry (repeatable)" + note,
    )


def add_allow_imports_option(parser: argparse.ArgumentParser, *, default: str) -> None:
    """``--allow-imports PREFIX`` (repeatable); ``default`` says what holds without it."""
    parser.add_argument(
        "--allow-imports",
        metavar="PREFIX",
        action="append",
        default=None,
        help="module prefixes graphs may import functions, judges and tools from "
        f"(repeatable or comma-separated; default: ${ALLOW_IMPORTS_ENV}, else {default})",
    )


def allowed_imports(args: argparse.Namespace) -> list[str] | None:
    """The module prefixes ``--allow-imports`` lists, else ``$MAGISTRATE_ALLOW_IMPORTS``;
    None when neither is given (the command's default applies). Nothing read from a store
    ever adds to them."""
    if args.allow_imports is not None:
        listed = ",".join(args.allow_imports)
    else:
        listed = os.environ.get(ALLOW_IMPORTS_ENV, "").strip()
        if not listed:
            return None
    return [prefix.strip() for prefix in listed.split(",") if prefix.strip()]


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text for people (default), json for programs",
    )


def store_url(args: argparse.Namespace) -> str:
    """The store URL the command uses: ``--store``, else ``$MAGISTRATE_STORE``, else the default."""
    return args.store or os.environ.get("MAGISTRATE_STORE") or DEFAULT_STORE


def heads_path(args: argparse.Namespace) -> str | None:
    """The heads file the command uses: ``--heads``, else ``$MAGISTRATE_HEADS``, else the
    one beside a SQLite store; None for ``none`` (or a PostgreSQL store without one)."""
    named = getattr(args, "heads", None) or os.environ.get(HEADS_ENV)
    if named is not None:
        return None if named.lower() == "none" else named
    return heads_path_beside(store_url(args))


def _sqlite_path(url: str) -> str | None:
    """The file a SQLite store URL names; None for a server URL (PostgreSQL)."""
    lowered = url.lower()
    if lowered.startswith(("postgresql://", "postgres://")):
        return None
    if lowered.startswith("sqlite:///"):
        return url[len("sqlite:///") :]
    return None if "://" in url else url


#: What a command does with the store's heads file: ``record`` heads in it (the commands
#: that write runs), ``check`` it (``verify``), ``read`` it where it can (the commands
#: that show runs: they check the heads recorded for what they show), or nothing
#: (``unused``: ``export``, ``heads``).
HeadsUse = Literal["record", "check", "read", "unused"]


def _heads_problem(path: str, url: str, use: HeadsUse) -> tuple[bool, str | None]:
    """Whether ``path`` is the store's own heads file (the one beside it, however either
    is spelled), and what keeps the command from using it (blocking), or None: a
    directory, a file that cannot be read (for a command that reads it), or a named one
    in a directory that does not exist."""
    beside = heads_path_beside(url)
    own = beside is not None and os.path.realpath(path) == os.path.realpath(beside)
    if os.path.isdir(path):
        return own, "it is a directory"
    directory = os.path.dirname(path)
    if not own and not os.path.isdir(directory or "."):  # the own: the store says so
        return own, f"its directory {directory} does not exist"
    if use in ("check", "read"):
        try:
            open(path, "rb").close()
        except FileNotFoundError:
            return own, None  # no heads recorded yet
        except OSError as exc:
            return own, f"it cannot be read: {exc.strerror or exc}"
    return own, None


async def _usable_heads(path: str, url: str, use: HeadsUse) -> str | None:
    """``path``, the command's heads file, once it can be used as ``use`` says; None for
    the store's own that a reading command cannot read (said on stderr: it shows runs
    without checking their recorded heads). Raises UsageError (exit 2) for a heads file
    no head could be recorded in or read from (a directory, an unreadable file, or a
    ``--heads`` in a directory that does not exist), rather than warn of it at each
    commit and keep no heads."""
    own, problem = await anyio.to_thread.run_sync(_heads_problem, path, url, use)
    if problem is None:
        return path
    if own and use in ("read", "unused"):
        if use == "read":
            sys.stderr.write(
                printable(
                    f"magistrate: warning: heads file {path}: {problem}; the heads recorded "
                    "for runs are not checked (move it away, or name a file with --heads)\n"
                )
            )
        return None
    if own:
        fix = "move it away, name another file with --heads, or --heads none"
    elif problem.startswith("its directory"):
        fix = "name a file in one that does, or --heads none"
    else:
        fix = "name a file, or --heads none"
    raise UsageError(f"heads file {path}: {problem} ({fix})")


async def _no_store(path: str, url: str) -> UsageError:
    """The refusal of a store file that is not there, saying so when the heads file
    beside it shows a store was there (moved or deleted: its runs are gone with it)."""
    beside = heads_path_beside(url)
    if beside is not None and await anyio.Path(beside).is_file():
        if (await anyio.Path(beside).stat()).st_size > 0:
            return UsageError(
                f"no store at {path}, but its heads file {beside} records runs: the store "
                "was moved or deleted (restore it, or name another with --store or "
                "MAGISTRATE_STORE)"
            )
    return UsageError(f"no store at {path} (name one with --store or MAGISTRATE_STORE)")


async def store_for(
    args: argparse.Namespace, *, create: bool = False, heads: HeadsUse = "record"
) -> EventStore:
    """The command's store (:func:`eventstore.open_store` reads the URL), not opened yet:
    nothing is created until :func:`opened` opens it.

    ``create=False`` (read and control commands): a missing or empty SQLite file is a
    usage error, so a mistyped path never leaves an empty store behind (SQLite would make
    an empty file a database). ``heads``: what the command does with the heads file (see
    :data:`HeadsUse`). Raises UsageError for a bad URL or heads file.
    """
    url = store_url(args)
    path = _sqlite_path(url)
    if path is not None and not create:
        file = anyio.Path(path)
        if not await file.exists():
            raise await _no_store(path, url)
        if await file.is_file() and (await file.stat()).st_size == 0:
            raise UsageError(f"no store at {path}: the file is empty")
    named = heads_path(args)
    kept = None if named is None else await _usable_heads(named, url, heads)
    try:
        return eventstore_open(url, heads_file=kept, create=create)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


@asynccontextmanager
async def opened(store: EventStore) -> AsyncIterator[EventStore]:
    """Open ``store`` (from :func:`store_for`) for the block.

    Raises UsageError for a server that cannot be connected to or a PostgreSQL schema
    that holds no store (where it may not be created), NotAStoreError or
    SchemaVersionError for a file that is not ours (left unchanged).
    """
    try:
        await store.open()
    except (StoreUnreachableError, StoreMissingError) as exc:
        # A server that does not answer, or a schema that holds no store, is a bad
        # --store, like a missing file.
        raise UsageError(str(exc)) from exc
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def open_store(
    args: argparse.Namespace, *, create: bool = False, heads: HeadsUse = "record"
) -> AsyncIterator[EventStore]:
    """Open the command's store for the block: :func:`store_for`, then :func:`opened`."""
    async with opened(await store_for(args, create=create, heads=heads)) as store:
        yield store


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` with its noun in the number it needs: "1 step", "2 steps"."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _data_format(name: str) -> Literal["toml", "yaml", "json"]:
    """The format of an input or script file, by its suffix (as a graph file's): YAML,
    TOML, else JSON."""
    lower = name.lower()
    if lower.endswith((".yaml", ".yml")):
        return "yaml"
    return "toml" if lower.endswith(".toml") else "json"


def read_file(name: str, what: str) -> Any:
    """The data in a JSON or YAML file (:func:`runtime.spec.read_data`: the rules graph
    files are read by). Raises UsageError naming ``what`` (``input file in.yaml``) and
    the problem, with its line where the parser gives it."""
    from ..spec import read_data  # the spec's reader, loaded for commands that read data

    try:
        raw = Path(name).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror or exc}") from exc
    try:
        return read_data(raw, _data_format(name), source=what)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _value(key: str, text: str) -> Any:
    """A JSON value when the text is one (``3``, ``true``, ``{"a": 1}``), else the text.
    JSON that breaks the rules input files are read by (a key twice, NaN) is refused."""
    from ..spec import read_data  # the spec's reader, loaded for commands that read data

    try:
        return read_data(text, "json", source=f"--input {key}")
    except ValueError as exc:
        refused = str(exc)
    try:
        json.loads(text)  # Python's lenient reading: is it JSON at all?
    except ValueError:
        return text
    except RecursionError:
        pass  # JSON, nested too deep
    if not text.lstrip().startswith(("{", "[")):  # NaN, Infinity: meant as text?
        refused += f"; for the text, give a JSON string: --input '{key}={json.dumps(text)}'"
    raise UsageError(refused)


def _checked(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data``, unless the library would refuse it as a run's input: UsageError then,
    before any store is opened or created."""
    from ..events import check_input

    try:
        check_input(data)
    except TypeError as exc:  # a MemoryValueError too
        raise UsageError(f"{where}: {exc}") from exc
    return data


def parse_inputs(pairs: list[str] | None, files: list[str] | None = None) -> dict[str, Any]:
    """Merge ``--input-file`` objects (JSON or YAML, in order), then ``--input k=v`` pairs.

    A value that parses as JSON is taken as JSON (numbers, booleans, lists, objects),
    anything else as a string. Files and values are read by the rules graph files are
    read by (no key twice, no NaN, YAML 1.2 numbers) and checked as a run's input is
    (what its log cannot store as given is refused), so a refused input opens no store.
    Raises UsageError naming the bad pair or file.
    """
    data: dict[str, Any] = {}
    for name in files or ():
        loaded = read_file(name, f"input file {name}")
        if not isinstance(loaded, dict):
            raise UsageError(f"input file {name} must hold an object, not {type(loaded).__name__}")
        data.update(_checked(loaded, f"input file {name}"))
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--input {pair!r}: expected KEY=VALUE")
        key = key.strip()
        data.update(_checked({key: _value(key, value)}, "--input"))
    return data


def to_builtins(value: Any) -> Any:
    """Structs and other msgspec-known values as JSON-ready builtins."""
    return msgspec.to_builtins(value, builtin_types=(), str_keys=True)


def discard_stdout() -> None:
    """Point stdout at the null device: its reader went away, and what is still written
    (or flushed at exit) must not fail again."""
    dropped(BrokenPipeError())


@contextmanager
def stdout_may_go() -> Iterator[None]:
    """Write (and flush) the result of a command that recorded something to a stdout
    that may fail: a reader gone away (``| head -0``, a closed pipe) drops it quietly,
    another failure (``> /dev/full``) with one line on stderr; either way what the
    command reports stands, and it keeps its exit code."""
    try:
        yield
        sys.stdout.flush()
    except OSError as exc:
        dropped(exc)


def emit_json(value: Any, out: TextIO | None = None) -> None:
    """Write one JSON document (and a newline) to stdout."""
    stream = out if out is not None else sys.stdout
    stream.write(msgspec.json.encode(to_builtins(value)).decode())
    stream.write("\n")
