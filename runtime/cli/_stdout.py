"""A command's stdout, which may fail: its reader went away (``magistrate runs | head -1``),
or what it names cannot take the output (``magistrate runs > /dev/full``).

:class:`WatchedStdout` wraps stdout and remembers each error a write or a flush of it
raised, so ``main`` tells a failure of stdout from any other, whatever exception reached
it. At the command's end, :meth:`WatchedStdout.end` flushes what is still buffered: a pipe
or a file is block-buffered (unless ``PYTHONUNBUFFERED`` is set), and a short output would
otherwise meet the failure only when the interpreter flushes stdout at exit (``Exception
ignored``, exit 120). On a failure, stdout is pointed at the null device, as in Python's
recipe for ``BrokenPipeError`` (the ``signal`` module's notes), so nothing written later,
nor the flush at exit, fails again.

A departed reader ends the command quietly; any other failure is said in one line on
stderr. Either way the exit code is :data:`EXIT_STDOUT_FAILED` (1), unless the command kept
its own (``stdout_may_go``: what it recorded stands). This module imports nothing of the
runtime: ``magistrate --help`` goes through it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from contextlib import suppress
from typing import Any, Final, TextIO

__all__ = ["EXIT_STDOUT_FAILED", "WatchedStdout", "dropped"]

#: The exit code of a command whose stdout could not be written: ``1``, failed.
EXIT_STDOUT_FAILED: Final = 1


class WatchedStdout:
    """A text stream that writes through ``inner`` and remembers the errors it raised."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.failures: list[OSError] = []

    def write(self, text: str) -> int:
        try:
            return self.inner.write(text)
        except OSError as exc:
            self.failures.append(exc)
            raise

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.inner.flush()
        except OSError as exc:
            self.failures.append(exc)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cause(self, exc: BaseException) -> OSError | None:
        """The failure of stdout ``exc`` is, or was raised because of (its cause, its
        context, an exception of its group), if any."""
        pending: list[BaseException | None] = [exc]
        seen: set[int] = set()
        while pending:
            current = pending.pop()
            if current is None or id(current) in seen:
                continue
            seen.add(id(current))
            for failure in self.failures:
                if current is failure:
                    return failure
            pending += [current.__cause__, current.__context__]
            if isinstance(current, BaseExceptionGroup):
                pending += current.exceptions
        return None

    def fail(self, failure: OSError) -> int:
        """End the command for ``failure`` (see :func:`dropped`); the exit code."""
        dropped(failure, self.inner)
        return EXIT_STDOUT_FAILED

    def end(self, code: int) -> int:
        """Flush what is still buffered: ``code``, or the exit code of its failure."""
        try:
            self.flush()
        except OSError as exc:
            return self.fail(exc)
        return code


def dropped(failure: OSError, stream: TextIO | None = None) -> None:
    """The output to ``stream`` (stdout by default) failed with ``failure``: quietly for a
    departed reader, else one line on stderr naming the problem; then its descriptor is
    pointed at the null device, so what is still buffered, or written later, is dropped
    there rather than failing again."""
    if not isinstance(failure, BrokenPipeError):
        reason = failure.strerror or str(failure) or type(failure).__name__
        with suppress(OSError, ValueError):  # stderr may be gone too: nothing to say then
            sys.stderr.write(
                f"magistrate: error: cannot write to stdout: {reason}; the command's "
                "output is lost or cut short (what it recorded stands)\n"
            )
            sys.stderr.flush()
    with suppress(OSError, ValueError):  # a stream with no descriptor (io.StringIO)
        fd = (sys.stdout if stream is None else stream).fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
