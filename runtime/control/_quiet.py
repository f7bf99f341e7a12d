"""Which live runs a look at the store for other processes' events reads (see
``_ownership.RunOwnership.watch_control``)."""

from __future__ import annotations

__all__ = ["quiet_runs"]


def quiet_runs(
    marks: dict[str, int | None], heads: dict[str, int]
) -> tuple[list[str], dict[str, int | None]]:
    """The live runs whose heads a look at the store reads, and the marks for the next look.

    ``heads``: each live run's last seq handed to the store here; ``marks``: the last
    look's (a run's seq then, or None if it was read then). A run is read if it handed
    nothing over since the last look and was not read at it. Looking every half
    ``control_interval``, a foreign event reaches a run within the interval: read within
    two looks, or met sooner by a batch the run handed over after it (that batch's
    expected seq is behind the store's: ConcurrencyError, taken in or settled). A run new
    since the last look is marked, not read (read at the next look if it stays quiet).
    """
    # -1: a run new since the last look (never a seq); None: read at it.
    to_read = [run_id for run_id, seq in heads.items() if marks.get(run_id, -1) == seq]
    next_marks: dict[str, int | None] = dict(heads)
    for run_id in to_read:
        next_marks[run_id] = None
    return to_read, next_marks
