"""A validate-to-fix graph loop (the hourly-tracking pattern): ``python -m examples.validate_fix``.

::

    parse (function) --> validate (verifier: jsonpath)
    validate  validate_verification_passed --> summarise (function, terminal)
              otherwise                    --> fix (function) --> validate

``parse`` reads a week of timesheet lines; ``validate`` asserts that no entry's hours are
outside 0..12 (the RFC 9535 JSONPath ``$.entries[?@.hours < 0 || @.hours > 12]`` matches
nothing: ``not_exists``); ``fix`` repairs the first bad entry it finds (a stray minus, or
a missing decimal point) and records what it did; the loop runs until the check passes,
bounded by ``max_steps``. The goal's scorecard, measured at the end, checks the total and
how many fixes were needed. It runs offline: no model is involved.
"""

from .loop import FUNCTIONS, TIMESHEET, build_graph, run_loop

__all__ = ["FUNCTIONS", "TIMESHEET", "build_graph", "run_loop"]
