"""Resolving the Python callables a spec names: a registered name, or an allowed import path.

A graph file is data: by default it may name only callables, tools and judges registered
with the Runtime. An import path ``"package.module:attr"`` is followed only when the
application lists a module prefix that covers it (``Runtime(allow_imports=["myapp.nodes"])``),
and then only to an object defined in such a module (not merely imported into one), through
no private name and no nested module. Allowing imports makes a graph file code: whoever
writes the file picks which of the allowed callables run, with which memory keys.
"""

from __future__ import annotations

import difflib
import importlib
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import SpecError

__all__ = ["import_allowed", "import_reference", "resolve_callable"]


def _under(module_name: str, prefixes: Sequence[str]) -> bool:
    return any(module_name == p or module_name.startswith(p + ".") for p in prefixes if p)


def import_allowed(reference: str, allow_imports: Sequence[str]) -> bool:
    """Whether ``reference`` is a ``"module:attr"`` path under one of ``allow_imports``."""
    module_name, sep, attribute = reference.partition(":")
    return bool(sep and attribute) and _under(module_name, allow_imports)


def import_reference(
    reference: str,
    allow_imports: Sequence[str],
    *,
    path: str,
    what: str = "function",
    defined_by: Callable[[Any], Any] | None = None,
) -> Any:
    """Import the object ``reference`` (``"package.module:attr"``) names, if allowed.

    Raises SpecError naming ``path`` when the reference is malformed, its module is not
    under one of the ``allow_imports`` prefixes, the walk passes a private name or a
    module, the object is defined outside the allowed modules (``defined_by(object)``:
    what tells where it was defined, for a wrapper such as a Tool), or it cannot be
    imported.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise SpecError(
            path, f"{reference!r} is neither a registered {what} nor a 'package.module:attr' path"
        )
    if not _under(module_name, allow_imports):
        allowed = ", ".join(repr(p) for p in allow_imports) or "none"
        raise SpecError(
            path,
            f"{reference!r} is not a registered {what}, and importing from module "
            f"{module_name!r} is not allowed (allowed: {allowed}; --allow-imports "
            f"{module_name} on the command line, allow_imports=[{module_name!r}] in an app)",
        )
    parts = attribute.split(".")
    if module_name.startswith(".") or any(not part or part.startswith("_") for part in parts):
        raise SpecError(path, f"{reference!r}: relative modules and private names are refused")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(path, f"cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # it raised while it ran (a SyntaxError, a failing setup)
        reason = f"importing module {module_name!r} raised {type(exc).__name__}: {exc}"
        raise SpecError(path, reason) from exc
    for part in parts:
        try:
            target = getattr(target, part)
        except AttributeError:
            reason = f"module {module_name!r} has no attribute {attribute!r}"
            public = [name for name in dir(target) if not name.startswith("_")]
            raise SpecError(path, reason + _did_you_mean(part, public)) from None
        if isinstance(target, types.ModuleType):
            raise SpecError(path, f"{reference!r} walks into module {target.__name__!r}")
    origin = target if defined_by is None else defined_by(target)
    defined_in = getattr(origin, "__module__", None)
    if not isinstance(defined_in, str) or not _under(defined_in, allow_imports):
        raise SpecError(
            path,
            f"{reference!r} is defined in module {defined_in!r}, outside the allowed "
            "prefixes (only objects defined in an allowed module can be imported"
            + (
                f"; to use it, allow {defined_in!r} too: --allow-imports {defined_in} "
                f"on the command line, allow_imports=[..., {defined_in!r}] in an app)"
                if isinstance(defined_in, str)
                else ")"
            ),
        )
    return target


def _did_you_mean(name: str, candidates: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the candidate closest to a misspelt ``name``, else ""."""
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def resolve_callable(
    reference: str,
    registry: Mapping[str, Callable[..., Any]],
    *,
    path: str,
    allow_imports: Sequence[str] = (),
) -> Callable[..., Any]:
    """Return the callable named by ``reference``: a registered name first, else an import
    path allowed by ``allow_imports`` (see :func:`import_reference`).

    Raises SpecError naming ``path`` when it cannot be found, is not allowed or is not
    callable.
    """
    if reference in registry:
        return registry[reference]
    if ":" not in reference and (hint := _did_you_mean(reference, list(registry))):
        raise SpecError(path, f"{reference!r} is not a registered function{hint}")
    target = import_reference(reference, allow_imports, path=path)
    if not callable(target):
        raise SpecError(path, f"{reference!r} is not callable")
    return target  # type: ignore[no-any-return]
