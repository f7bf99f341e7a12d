"""Runnable benchmarks: ``python -m benchmarks NAME [--quick]`` or ``python -m benchmarks all``.

Each benchmark is a module ``benchmarks/<name>.py`` with ``main(quick: bool) -> None``. It
prints a readable table, then one line per figure: ``name: value unit``. Modules whose name
starts with an underscore are helpers, not benchmarks. Never part of the test run.
"""
