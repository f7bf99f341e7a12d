"""Resolving the Python callables a spec names ("package.module:function" or a registered name)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import SpecError

__all__ = ["resolve_callable"]


def resolve_callable(
    reference: str, registry: Mapping[str, Callable[..., Any]], *, path: str
) -> Callable[..., Any]:
    """Return the callable named by ``reference``: a registered name first, else an import path.

    Raises SpecError naming ``path`` when it cannot be found or is not callable.
    """
    if reference in registry:
        return registry[reference]
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise SpecError(
            path,
            f"{reference!r} is neither a registered function nor a 'package.module:function' path",
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(path, f"cannot import module {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            reason = f"module {module_name!r} has no attribute {attribute!r}"
            raise SpecError(path, reason) from None
    if not callable(target):
        raise SpecError(path, f"{reference!r} is not callable")
    return target  # type: ignore[no-any-return]
