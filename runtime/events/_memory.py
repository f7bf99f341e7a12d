"""A run's memory as events write it: the reducers, and which lists the state may grow.

Memory reducers (a memory key's ``reducer``, recorded as ``MemoryWritten.op``):

- ``replace``: the key takes the written value.
- ``append``: the key's value is a list and the written value becomes its last item. A key
  that is absent or None starts as ``[]``; a list (or tuple) value keeps its items; any
  other value (a string, a number, a dict) becomes the list's first item, so ``"ab"``
  then ``1`` gives ``["ab", 1]``, never the string's characters. Each write is O(1): the
  state owns the lists it grew (it copies a list it did not create once, on its first
  append), so no write copies the whole list.
- ``merge``: the key's value is a dict updated with the written dict; a value that is not
  a dict (on either side) counts as ``{}``.

A state's owned keys are kept in its ``__dict__`` beside its fields (not one of them: they
are no part of the run's state, and ``==`` and encoding ignore them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ._catalogue import MemoryWritten

__all__ = [
    "HasMemory",
    "disown",
    "disown_values",
    "owned",
    "read_memory",
    "write_memory",
]


class HasMemory(Protocol):
    """A state with a memory (``RunState``; a protocol so this module needs no import of it)."""

    memory: dict[str, Any]


def owned(state: HasMemory) -> set[str]:
    """The memory keys whose list value ``state`` created and may grow in place.

    A state built any other way than by ``apply`` owns nothing.
    """
    attrs = state.__dict__
    keys: set[str] | None = attrs.get("_owned")
    if keys is None:
        keys = attrs["_owned"] = set()
    return keys


def disown(state: HasMemory, keys: Iterable[str] | None = None) -> None:
    """Give up in-place growth of ``keys``' lists (all keys by default).

    For a holder that hands a memory list to code that may keep it (a node running beside
    others, a result given to the caller): the next append to such a key copies the list
    once instead of changing the object someone else holds.
    """
    keys_owned = state.__dict__.get("_owned")
    if keys_owned:
        if keys is None:
            keys_owned.clear()
        else:
            keys_owned.difference_update(keys)


def disown_values(state: HasMemory, values: Iterable[Any]) -> None:
    """Give up in-place growth of every memory list that is one of ``values``.

    For a batch of writes whose values may be the state's own lists (a node that returned
    a list it was given): call it before applying them, so that appending to that list's
    key does not change a value that is about to be written elsewhere.
    """
    keys_owned = state.__dict__.get("_owned")
    if not keys_owned:
        return
    shared = {id(value) for value in values if type(value) is list}
    if shared:
        memory = state.memory
        keys_owned.difference_update([k for k in keys_owned if id(memory.get(k)) in shared])


def read_memory(state: HasMemory, keys: Sequence[str], *, shared: bool) -> dict[str, Any]:
    """What a node reads of the memory: ``keys`` (all of it when none are named).
    ``shared``: it runs beside others (a branch of a fan-out), so a list it gets must not
    grow in place when another appends to its key."""
    memory = state.memory
    inputs = {k: memory[k] for k in keys if k in memory} if keys else dict(memory)
    if shared:
        disown(state, inputs)
    return inputs


def _append(memory: dict[str, Any], keys_owned: set[str], key: str, value: Any) -> None:
    if key in keys_owned:
        memory[key].append(value)  # a list this state created: ours to grow
        return
    old = memory.get(key)
    if isinstance(old, list | tuple):
        grown = list(old)
    else:
        grown = [] if old is None else [old]
    grown.append(value)
    memory[key] = grown
    keys_owned.add(key)


def write_memory(state: HasMemory, body: MemoryWritten) -> None:
    """Apply one memory write to ``state.memory`` by its reducer (``body.op``)."""
    key, op, value = body.key, body.op, body.value
    memory = state.memory
    # Made by the first append (a state without one owns nothing: no set per run).
    keys_owned: set[str] | None = state.__dict__.get("_owned")
    if keys_owned and type(value) is list:
        # The written value is one of our lists (a node passed its input on): that list
        # is now also held elsewhere, so it is no longer ours to grow in place.
        disown_values(state, (value,))
    if op == "append":
        _append(memory, owned(state), key, value)
        return
    if op == "merge":
        old = memory.get(key)
        merged = dict(old) if isinstance(old, dict) else {}
        if isinstance(value, dict):
            merged.update(value)
        memory[key] = merged
    else:
        memory[key] = value
    if keys_owned:
        keys_owned.discard(key)
