"""Where the command finds the modules a graph or ``--tools`` names.

The working directory is never on ``sys.path``: a ``rich.py`` or ``yaml.py`` lying there
must not replace an installed package the command imports. A module the command is
told to import (an allowed import prefix, a ``--tools`` module) may still live in the
working directory, as a script's modules do: :func:`search_working_directory` lets the
import system look there for those top-level names only, after every installed location.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType

__all__ = ["WorkingDirectoryFinder", "search_working_directory"]


class WorkingDirectoryFinder(importlib.abc.MetaPathFinder):
    """Finds the named top-level modules in one directory; consulted last (it sits at the
    end of ``sys.meta_path``), so an installed module of the same name wins."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.names: set[str] = set()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        # A submodule (path given) is found through its package's own __path__.
        if path is not None or fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [self.directory])


def search_working_directory(modules: Iterable[str]) -> None:
    """Let the top-level packages of ``modules`` (``"myapp.nodes"``, ``"steps"``) be
    imported from the working directory when no installed location has them."""
    names = {module.strip().split(".")[0] for module in modules if module.strip()}
    names.discard("")
    if not names:
        return
    finder = next((f for f in sys.meta_path if isinstance(f, WorkingDirectoryFinder)), None)
    if finder is None:
        finder = WorkingDirectoryFinder(os.getcwd())
        sys.meta_path.append(finder)
    finder.names.update(names)
