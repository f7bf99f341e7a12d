"""Each package's public surface is exactly what its ``__init__`` lists in ``__all__``."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = ["actors", "eventstore", "runtime"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    package = importlib.import_module(name)
    exported = set(package.__all__)
    assert len(exported) == len(package.__all__), "duplicates in __all__"
    for public in exported:
        assert not public.startswith("_"), f"{name}.__all__ leaks private name {public}"
        assert hasattr(package, public), f"{name}.__all__ names missing {public}"
    for attr, value in vars(package).items():
        if attr.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if attr == "annotations":  # from __future__ import annotations
            continue
        assert attr in exported, f"{name}.{attr} is public but not in __all__"


@pytest.mark.parametrize(
    ("lower", "higher"),
    [("actors", "eventstore"), ("actors", "runtime"), ("eventstore", "runtime")],
)
def test_dependencies_point_one_way(lower: str, higher: str) -> None:
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / lower
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert f"import {higher}" not in text and f"from {higher}" not in text, (
            f"{path} imports {higher}: dependencies must point runtime -> eventstore -> actors"
        )
