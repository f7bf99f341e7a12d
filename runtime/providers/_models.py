"""Default models and per-model request shaping: what may be sent to which model family.

The defaults are the one place to change when a provider retires a model; they are
taken from the official SDKs' own model lists (``openai.types.ChatModel``,
``anthropic.types.Model``), and docs/concepts.md names them with the date they were
checked. A model string a user gives is passed through as given: the family only
decides which request fields travel with it.

A family is chosen from the model name by the first matching prefix of its provider's
table, so an unknown name (a local server's model, a model newer than this table) gets
the provider's fallback family:

- **OpenAI reasoning models** (``o1``, ``o3``, ``o4``, ``gpt-5``, ``gpt-6``, except the
  ``-chat`` variants) refuse sampling parameters (``temperature``), take the token cap
  as ``max_completion_tokens``, and spend part of that cap on reasoning before they
  answer; calls whose answer is a short verdict (judges, routers, verifiers, goal
  scoring) ask for ``reasoning_effort: "low"``.
- **OpenAI chat models** and OpenAI-compatible servers take ``temperature`` and the
  provider's configured cap field.
- **Anthropic's current generations** (Claude 4 and later) take no sampling
  parameters and may think before answering; the Claude 3 family still takes
  ``temperature``.

Determinism for judges comes from their prompt and from parsing the answer, never
from a parameter a model refuses.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_OPENAI_MODEL",
    "ModelFamily",
    "anthropic_family",
    "openai_family",
    "wire_token_cap",
]

# Checked against openai 3.57.0 and anthropic 2.14.0 (their model lists) on 2026-11-26.
DEFAULT_OPENAI_MODEL = "gpt-5.4-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-haiku-5-5"

# Purposes whose answer is a short verdict: the model needs little reasoning for them.
VERDICT_PURPOSES = frozenset({"judge", "route", "verify", "outcome", "branch_judge"})


class ModelFamily(msgspec.Struct, frozen=True, kw_only=True):
    """What one family of models accepts.

    ``sampling``: ``temperature`` may be sent. ``cap_field``: the name of the token cap
    (None: the provider's own setting). ``thinking_room``: tokens added to a request's
    answer cap, because the model's reasoning counts against the cap the API enforces;
    a judge's 512-token answer is not eaten by its thinking. ``low_effort``: the
    request field and value that ask for little reasoning on verdict calls, if the API
    has one.
    """

    name: str
    sampling: bool = True
    cap_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    thinking_room: int = 0
    low_effort: tuple[str, str] | None = None


_OPENAI_REASONING = ModelFamily(
    name="openai-reasoning",
    sampling=False,
    cap_field="max_completion_tokens",
    thinking_room=4096,
    low_effort=("reasoning_effort", "low"),
)
_OPENAI_CHAT = ModelFamily(name="openai-chat")
_ANTHROPIC_CURRENT = ModelFamily(name="anthropic-current", sampling=False, thinking_room=4096)
_ANTHROPIC_LEGACY = ModelFamily(name="anthropic-claude-3")

_OPENAI_TABLE: tuple[tuple[str, ModelFamily], ...] = (
    ("o1", _OPENAI_REASONING),
    ("o3", _OPENAI_REASONING),
    ("o4", _OPENAI_REASONING),
    ("gpt-5", _OPENAI_REASONING),
    ("gpt-6", _OPENAI_REASONING),
)
_ANTHROPIC_TABLE: tuple[tuple[str, ModelFamily], ...] = (
    ("claude-3", _ANTHROPIC_LEGACY),
    ("claude-", _ANTHROPIC_CURRENT),
)


def openai_family(model: str) -> ModelFamily:
    """The family of an OpenAI (or OpenAI-compatible) model name; chat by default."""
    bare = model.rsplit("/", 1)[-1]  # "openai/gpt-5" on a routing server
    if "-chat" in bare:
        return _OPENAI_CHAT  # the chat variants of reasoning generations take sampling
    for prefix, family in _OPENAI_TABLE:
        if bare.startswith(prefix):
            return family
    return _OPENAI_CHAT


def anthropic_family(model: str) -> ModelFamily:
    """The family of an Anthropic model name; current generation by default."""
    for prefix, family in _ANTHROPIC_TABLE:
        if model.startswith(prefix):
            return family
    return _ANTHROPIC_CURRENT


def wire_token_cap(family: ModelFamily, answer_cap: int) -> int:
    """The cap sent for an answer of at most ``answer_cap`` tokens: room for thinking
    added where the family's reasoning counts against it."""
    return answer_cap + family.thinking_room
