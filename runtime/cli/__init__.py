"""The ``magistrate`` command line: run graph files, read and audit runs, steer them.

``magistrate --help`` lists the commands; ``docs/cli.md`` describes each. The entry point
is :func:`main`; ``python -m runtime.cli`` runs it too.
"""

from ._app import main

__all__ = ["main"]
