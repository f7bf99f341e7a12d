"""How a listing's row bounds its texts: a failed run's error, a gated node's description
and success criteria. A page of runs stays light whatever one run holds; the run's detail
(and ``magistrate show``) gives them whole. (Memory values are bounded where the row's
pause is made: ``_shown.listed_pause``.)"""

from __future__ import annotations

from typing import Any

import msgspec

from ._records import PauseView, RunSummary

__all__ = ["LISTED_TEXT_CHARS", "listed_row"]

#: The characters of a text a listing's row carries at most (a failed run's error, a gated
#: node's description, its success criteria together); a longer one is cut there and ends
#: with "…", and ``shortened`` (the row's, or its pause's) names it.
LISTED_TEXT_CHARS = 500


def listed_row(row: RunSummary) -> RunSummary:
    """``row`` as a listing carries it: its ``error`` cut to ``LISTED_TEXT_CHARS`` when
    longer (the row's ``shortened`` is then ``["error"]``), and its pause's texts
    (:func:`_listed_texts`)."""
    error = None if row.error is None else _cut(row.error, LISTED_TEXT_CHARS)
    paused = None if row.paused is None else _listed_texts(row.paused)
    if error is None and paused is None:
        return row
    return msgspec.structs.replace(
        row,
        error=row.error if error is None else error,
        shortened=[] if error is None else ["error"],
        paused=row.paused if paused is None else paused,
    )


def _listed_texts(view: PauseView) -> PauseView | None:
    """``view`` with its node's description and success criteria cut to
    ``LISTED_TEXT_CHARS`` each, and named in ``shortened``; None when both fit."""
    description = _cut(view.description, LISTED_TEXT_CHARS)
    criteria = _listed_criteria(view.success_criteria)
    if description is None and criteria is None:
        return None
    return msgspec.structs.replace(
        view,
        description=view.description if description is None else description,
        success_criteria=view.success_criteria if criteria is None else criteria,
        shortened=[
            name
            for name, cut in (("description", description), ("success_criteria", criteria))
            if cut is not None
        ],
    )


def _cut(text: str, room: int) -> str | None:
    """``text``'s first ``room`` characters and "…" when it is longer; None when it fits."""
    return None if len(text) <= room else text[:room] + "…"


def _listed_criteria(criteria: list[Any]) -> list[Any] | None:
    """The success criteria that fit in ``LISTED_TEXT_CHARS`` characters together, in
    order: the first that does not fit is cut to the room left (one that is not text, only
    in a hand-written log, counts its JSON and is left out), those after it are left out;
    None when all fit."""
    room = LISTED_TEXT_CHARS
    for index, criterion in enumerate(criteria):
        text = criterion if isinstance(criterion, str) else msgspec.json.encode(criterion)
        if len(text) > room:
            kept = criteria[:index]
            return [*kept, text[:room] + "…"] if isinstance(text, str) and room else kept
        room -= len(text)
    return None
