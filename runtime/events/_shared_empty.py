"""The shared empty values a new live state's rarely filled containers start as.

A container holding one of these is replaced (by a container of its own) the first time
``apply`` fills it, never changed in place: changed once, every later state would start
with it. ``==`` and the encoded state cannot tell one from a new empty container.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_ENTRIES", "NO_ITEMS"]

#: The one empty dict (a map no event filled yet).
NO_ITEMS: dict[Any, Any] = {}
#: The one empty list (a list no event filled yet).
NO_ENTRIES: list[Any] = []
