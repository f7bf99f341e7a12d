"""The interpreter's thread switch interval while a store's writer thread runs.

The writer thread shares the GIL with the event loop. It gives the GIL up for each SQL
statement (SQLite works without it) and then needs it back, and it needs it when an append
wakes it. CPython hands the GIL from a thread that is running Python code to one that waits
only after the *switch interval* (``sys.getswitchinterval()``, 5 ms by default). So while
the loop is busy (many runs appending), each of those hand-overs can cost the writer up to
5 ms, and every appender waits for it: with 200 concurrent runs, commits took ~10 ms of
which ~2 ms was work. A shorter interval bounds that wait; it costs the loop a forced
switch only when another thread wants the GIL.

The interval is process-wide, so this is reference-counted over open stores: the first
store to open saves the interval in force and sets the shorter one, the last to close
puts the saved one back (unless someone changed it in between, in which case their value
is left alone).
"""

from __future__ import annotations

import sys
import threading

__all__ = ["SwitchIntervalLease"]

_lock = threading.Lock()
_leases: list[float] = []  # the interval each open store asked for
_saved = 0.0  # the interval in force before the first lease
_applied = 0.0  # the interval we set last
_user_changed = False  # someone else set it while leases were held: leave it alone


class SwitchIntervalLease:
    """Holds a switch interval of at most ``seconds`` until :meth:`release`."""

    __slots__ = ("_seconds",)

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a switch interval must be > 0 seconds, got {seconds!r}")
        global _saved, _user_changed
        self._seconds: float | None = seconds
        with _lock:
            if not _leases:
                _saved = sys.getswitchinterval()
                _user_changed = False
            else:
                _note_foreign_change()
            _leases.append(seconds)
            _set(min(*_leases, _saved))

    def release(self) -> None:
        """Give the lease back (idempotent); the last one restores the saved interval."""
        seconds, self._seconds = self._seconds, None
        if seconds is None:
            return
        with _lock:
            _note_foreign_change()
            _leases.remove(seconds)
            _set(min(*_leases, _saved) if _leases else _saved)


def _note_foreign_change() -> None:
    global _user_changed
    if sys.getswitchinterval() != _applied:
        _user_changed = True


def _set(seconds: float) -> None:
    global _applied
    if not _user_changed:
        sys.setswitchinterval(seconds)
        _applied = sys.getswitchinterval()  # as the interpreter rounded it
