"""Live progress of a run in the terminal, fed by the runtime's commit hook.

Lines for what a person watches (nodes, turns, verdicts with their feedback, retries,
stalls, pauses) go to stderr as the events are committed; on a terminal a status line
below them shows the current node, its turn, the judged verdicts, the node retries (failed
attempts run again) and the elapsed time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.markup import escape as markup_escape
from rich.text import Text

from eventstore import EventBody

from ..events import (
    LEVEL_NAMES,
    LlmTurn,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCancelled,
    RunFinished,
    RunPaused,
    RunResumed,
    StallDetected,
    Verdict,
)
from ._printable import printable

__all__ = ["Progress", "StderrConsole"]


def escape(text: str) -> str:
    """A run's text as rich shows it: its markup and its control characters escaped."""
    return markup_escape(printable(text))


_ACTION_STYLE = {"accept": "green", "retry": "yellow", "escalate": "red"}


class StderrConsole(Console):
    """A console on stderr that goes quiet once stderr's reader goes away (``magistrate
    run G 2>&1 | head``). Rich's own answer, exit 1 with stdout pointed at /dev/null,
    would leave the run half-way and lose its result."""

    def __init__(self) -> None:
        super().__init__(stderr=True)

    def on_broken_pipe(self) -> None:
        self.quiet = True


class Progress:
    """Shows one run's progress on ``console``; use as a context manager around the run.

    ``hook`` is the runtime commit hook (it only formats and prints, never blocks). Its
    first line names the run and ``where`` (the store), before the run's first events.
    It never raises: once stderr is gone (``magistrate run G 2>&1 | head``) it shows
    nothing more, and the run goes on (a hook's error would stop the run half-way).
    """

    def __init__(self, console: Console, *, quiet: bool = False, where: str = "") -> None:
        self.console = console
        self.quiet = quiet
        self.where = where
        self.announced = False
        self.started = time.monotonic()
        self.node: str | None = None
        self.turn = 0
        self.retries = 0
        self.verdicts = 0
        self._live: Live | None = None

    def __enter__(self) -> Progress:
        if not self.quiet and self.console.is_terminal:
            self._live = Live(
                self._status(), console=self.console, refresh_per_second=8, transient=True
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None

    def _status(self) -> Text:
        elapsed = time.monotonic() - self.started
        node = self.node or "-"
        return Text.assemble(
            ("running ", "bold"),
            (node, "cyan"),
            f"  turn {self.turn}  verdicts {self.verdicts}  node retries {self.retries}"
            f"  elapsed {elapsed:.1f}s",
        )

    def _line(self, markup: str) -> None:
        if not self.quiet:
            self.console.print(markup, highlight=False, soft_wrap=True)

    def hook(self, run_id: str, last_seq: int, bodies: Sequence[EventBody]) -> None:
        try:
            if not self.announced:
                self.announced = True
                self._line(f"run [bold]{run_id}[/] ({escape(self.where)})")
            for body in bodies:
                self._show(body)
            if self._live is not None:
                self._live.update(self._status())
        except OSError:  # the reader of stderr went away: show nothing more
            self.quiet = True
            live, self._live = self._live, None
            if live is not None:
                with suppress(OSError):
                    live.stop()

    def _show(self, body: EventBody) -> None:
        elapsed = f"[dim]{time.monotonic() - self.started:6.1f}s[/dim]"
        match body:
            case NodeStarted():
                self.node, self.turn = body.node_id, 0
                attempt = f", attempt {body.attempt}" if body.attempt > 1 else ""
                self._line(
                    f"{elapsed} [bold cyan]{escape(body.node_id)}[/] started "
                    f"(visit {body.visit}{attempt})"
                )
            case LlmTurn():
                self.turn = body.iteration
                calls = ", ".join(c.name for c in body.tool_calls)
                what = f"calls {escape(calls)}" if calls else "answers"
                tokens = f" [dim]{body.input_tokens}+{body.output_tokens} tokens[/dim]"
                self._line(f"{elapsed}   turn {body.iteration}: {what}{tokens}")
            case Verdict():
                if body.level != "bail_out":
                    self.verdicts += 1
                elif not body.error:  # (a judge that failed on it is shown)
                    return  # a tool-call turn: the judge waits for the node's answer
                style = _ACTION_STYLE.get(body.action, "white")
                level = LEVEL_NAMES.get(body.level, body.level)
                text = f"{elapsed}   [{style}]{body.action.upper()}[/] [{escape(level)}]"
                if body.confidence is not None:
                    text += f" confidence {body.confidence:.2f}"
                if body.feedback:
                    text += f": {escape(body.feedback)}"
                if body.error:  # a check that did not run: why the run is degraded
                    text += f" [red](judge error: {escape(body.error)})[/]"
                self._line(text)
            case StallDetected():
                self._line(
                    f"{elapsed}   [magenta]stall[/] at turn {body.iteration}: "
                    f"{escape(body.signature)}"
                )
            case NodeFailed():
                if body.will_retry:
                    self.retries += 1
                retry = " (will retry)" if body.will_retry else ""
                self._line(
                    f"{elapsed} [red]{escape(body.node_id)} failed[/]{retry}: "
                    f"{escape(body.error_type)}: {escape(body.error)}"
                )
            case NodeCompleted():
                self._line(f"{elapsed} [green]{escape(body.node_id)}[/] completed")
            case RunPaused():
                at = f" before {escape(body.node_id)}" if body.node_id else ""
                self._line(f"{elapsed} [yellow]paused[/] ({body.reason}){at}")
            case RunResumed():
                self._line(f"{elapsed} resumed")
            case RunCancelled():
                reason = f": {escape(body.reason)}" if body.reason else ""
                self._line(f"{elapsed} [red]cancelled[/]{reason}")
            case RunFinished():
                self._line(f"{elapsed} finished: {body.status} ({body.quality})")
            case _:
                pass
