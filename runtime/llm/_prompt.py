"""Building the conversation an LLM node sends: prompt layers, transitions, compaction.

Everything here is a pure function (no model calls, no I/O), so what a node sends is a
deterministic function of the spec and the event log:

- :func:`build_system_prompt`: the onion model. Identity (outermost, the same for every
  node), Narrative (the graph's goal, its criteria and constraints, shared context), Focus
  (innermost: this node's instructions and the outputs it must set).
- :func:`transition_marker`: the text inserted between nodes in continuous mode, saying
  what the finished phase produced and what the next one is for.
- :func:`estimate_tokens` / :func:`plan_compaction`: when the conversation outgrows its
  budget, the oldest messages are replaced by an extractive summary.
- :func:`to_chat_messages`: the event log's conversation entries as provider messages,
  for one node (isolated mode) or the whole run (continuous mode).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import msgspec

from ..events._conversation import ConversationEntry
from ..providers._base import ChatMessage

__all__ = [
    "SUMMARY_PREFIX",
    "ChatView",
    "GoalLike",
    "build_system_prompt",
    "conversation_summary",
    "estimate_tokens",
    "plan_compaction",
    "summarise_value",
    "summary_message",
    "to_chat_messages",
    "transition_marker",
]

#: The first line of a message that stands in for compacted history.
SUMMARY_PREFIX: Final = "[Summary of earlier conversation]"

_Role = Literal["user", "assistant", "tool", "system"]
_ROLES: Final[dict[str, _Role]] = {
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "system": "system",
}
_MESSAGE_OVERHEAD_TOKENS: Final = 4
_LINE_CHARS: Final = 160
_encode = msgspec.json.encode


class GoalLike(Protocol):
    """What the prompt needs of a goal (``runtime.Goal`` satisfies it).

    Criteria and constraints may be strings or objects with a ``description``.
    """

    @property
    def description(self) -> str: ...

    @property
    def success_criteria(self) -> Sequence[Any]: ...

    @property
    def constraints(self) -> Sequence[Any]: ...


def _item_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    description = getattr(item, "description", None)
    return description if isinstance(description, str) else str(item)


def _truncate(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line: newlines would break list formatting
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarise_value(value: Any, limit: int = 200) -> str:
    """A one-line, bounded rendering of an output value: strings as-is, the rest as JSON."""
    if isinstance(value, str):
        return _truncate(value, limit)
    try:
        text = _encode(value, order="sorted").decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    return _truncate(text, limit)


def build_system_prompt(
    *,
    identity: str,
    narrative: str,
    goal: GoalLike | None,
    focus: str,
    node_description: str,
    output_keys: Sequence[str],
    nullable_keys: Sequence[str] = (),
) -> str:
    """The onion-model system prompt: ``## Identity``, ``## Goal``, ``## Current task``.

    Layers are outermost first, so the prefix shared by every node of a graph (identity,
    then goal) stays byte-identical from node to node (good for provider prompt caches).
    Empty parts are left out, and a layer with nothing in it is omitted with its header.
    The Focus layer ends with the output contract: every non-nullable output key must be
    set with ``set_output(key, value)``; nullable ones are listed as optional.
    """
    sections: list[str] = []
    if identity.strip():
        sections.append(f"## Identity\n{identity.strip()}")

    narrative_parts: list[str] = []
    if goal is not None:
        if goal.description.strip():
            narrative_parts.append(f"Goal: {goal.description.strip()}")
        if goal.success_criteria:
            lines = "\n".join(f"- {_item_text(c)}" for c in goal.success_criteria)
            narrative_parts.append(f"Success criteria for the whole job:\n{lines}")
        if goal.constraints:
            lines = "\n".join(f"- {_item_text(c)}" for c in goal.constraints)
            narrative_parts.append(f"Constraints (never violate these):\n{lines}")
    if narrative.strip():
        narrative_parts.append(narrative.strip())
    if narrative_parts:
        sections.append("## Goal\n" + "\n\n".join(narrative_parts))

    focus_parts: list[str] = []
    if node_description.strip():
        focus_parts.append(node_description.strip())
    if focus.strip():
        focus_parts.append(focus.strip())
    nullable = set(nullable_keys)
    required = [k for k in output_keys if k not in nullable]
    optional = [k for k in output_keys if k in nullable]
    if required:
        focus_parts.append(
            "Required outputs: when the work is done, call set_output(key, value) for each "
            f"of: {', '.join(required)}."
        )
    if optional:
        focus_parts.append(
            "Optional outputs: call set_output(key, value) for any of these that apply: "
            f"{', '.join(optional)}."
        )
    if focus_parts:
        sections.append("## Current task\n" + "\n\n".join(focus_parts))
    return "\n\n".join(sections)


def transition_marker(
    *, from_node: str, outputs: Mapping[str, Any], to_node: str, to_description: str
) -> str:
    """The phase-transition text inserted between nodes in continuous mode.

    States which outputs the finished phase set (values summarised to one bounded line
    each, in the order given) and what the next phase is for, and asks the model to
    reflect before going on. Deterministic: the same arguments give the same text.
    """
    lines = [f'[Phase transition] Phase "{from_node}" is complete.']
    if outputs:
        lines.append("Outputs it produced:")
        lines.extend(f"- {key}: {summarise_value(value)}" for key, value in outputs.items())
    else:
        lines.append("It produced no outputs.")
    nxt = f'Next phase: "{to_node}"'
    if to_description.strip():
        nxt += f" - {to_description.strip()}"
    lines.append(nxt if nxt.endswith((".", "!", "?")) else nxt + ".")
    lines.append(
        "Briefly reflect on what has been accomplished and what the next phase needs, "
        "then follow the instructions for the new phase in the system prompt."
    )
    return "\n".join(lines)


def _message_chars(message: ChatMessage) -> int:
    chars = len(message.content)
    for call in message.tool_calls:
        chars += len(call.name) + len(_encode(call.arguments))
    return chars


def estimate_tokens(messages: Sequence[ChatMessage]) -> int:
    """A deterministic size estimate: ceil(chars / 4) plus 4 tokens per message.

    Characters count the content and, for tool calls, the name and JSON arguments. Good
    enough to decide when to compact; never used for billing.
    """
    total = 0
    for message in messages:
        total += -(-_message_chars(message) // 4) + _MESSAGE_OVERHEAD_TOKENS
    return total


def _summary_lines(message: ChatMessage) -> list[str]:
    content = message.content
    if content.startswith(SUMMARY_PREFIX):
        # An earlier summary: keep its lines rather than truncating them into one.
        return [ln for ln in content[len(SUMMARY_PREFIX) :].splitlines() if ln.strip()]
    if message.role == "tool":
        who = f"tool {message.name}" if message.name else "tool"
        return [f"{who}: {_truncate(content, _LINE_CHARS)}"]
    lines: list[str] = []
    if content.strip():
        lines.append(f"{message.role}: {_truncate(content, _LINE_CHARS)}")
    for call in message.tool_calls:
        args = summarise_value(call.arguments, _LINE_CHARS)
        lines.append(f"{message.role} called {call.name}({args})")
    return lines


def conversation_summary(messages: Sequence[ChatMessage], *, limit_chars: int = 2000) -> str:
    """An extractive, bounded summary of a conversation: what a custom judge reads.

    One line per message (as :func:`plan_compaction` summarises), the most recent ones
    that fit in ``limit_chars``, oldest first, preceded by ``(earlier messages omitted)``
    when some did not fit. Reads the messages from the end and stops at the limit, so its cost does
    not grow with the conversation.
    """
    kept: list[str] = []
    size = 0
    index = len(messages) - 1
    full = False
    while index >= 0 and not full:
        for line in reversed(_summary_lines(messages[index])):
            size += len(line) + 1
            if size > limit_chars:
                full = True
                break
            kept.append(line)
        else:
            index -= 1
    kept.reverse()
    if index >= 0:
        kept.insert(0, "(earlier messages omitted)")
    return "\n".join(kept)


def plan_compaction(
    messages: Sequence[ChatMessage],
    *,
    budget_tokens: int,
    keep_last: int = 6,
    summary_chars: int = 4000,
) -> tuple[int, str] | None:
    """Plan replacing the oldest messages by a summary when over ``budget_tokens``.

    Returns ``None`` when :func:`estimate_tokens` is within budget, or when nothing can be
    compacted. Otherwise returns ``(upto, summary)``: replace ``messages[:upto]`` by one
    message made with :func:`summary_message`. ``upto`` keeps at least the last
    ``keep_last`` messages, and is moved earlier so that it never separates an
    assistant's tool calls from their tool results (the first kept message is never a
    ``tool`` message). The summary is extractive and deterministic, no model call: one
    line per replaced message (``role: truncated content``, ``assistant called
    name(args)``, ``tool name: result``); earlier summaries are carried over line by line.
    When the lines exceed ``summary_chars``, the oldest are dropped and counted.
    """
    if estimate_tokens(messages) <= budget_tokens:
        return None
    upto = len(messages) - max(keep_last, 0)
    while 0 < upto < len(messages) and messages[upto].role == "tool":
        upto -= 1
    if upto <= 0:
        return None
    if upto == 1 and messages[0].content.startswith(SUMMARY_PREFIX):
        return None  # only the previous summary would be replaced: no gain
    lines: list[str] = []
    for message in messages[:upto]:
        lines.extend(_summary_lines(message))
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > summary_chars:
            break
        kept.append(line)
    kept.reverse()
    dropped = len(lines) - len(kept)
    if dropped:
        kept.insert(0, f"({dropped} earlier lines omitted)")
    return upto, "\n".join(kept)


def summary_message(summary: str) -> ChatMessage:
    """The user message that stands in for compacted history."""
    return ChatMessage(role="user", content=f"{SUMMARY_PREFIX}\n{summary}")


def chat_message(entry: ConversationEntry) -> ChatMessage:
    """The provider message of one conversation entry (see :func:`to_chat_messages`)."""
    content = entry.content or ""
    if entry.kind == "summary":
        if not content.startswith(SUMMARY_PREFIX):
            content = f"{SUMMARY_PREFIX}\n{content}"
        return ChatMessage(role="user", content=content)
    return ChatMessage(
        role=_ROLES.get(entry.role, "user"),
        content=content,
        tool_calls=entry.tool_calls,
        tool_call_id=entry.tool_call_id,
        name=entry.name,
        is_error=entry.kind == "tool_error",
    )


def to_chat_messages(
    entries: Sequence[ConversationEntry], *, node_id: str | None = None
) -> list[ChatMessage]:
    """Provider messages from logged conversation entries, oldest first.

    ``node_id=None`` keeps every entry (continuous mode); a node id keeps only that node's
    entries (isolated mode). A ``"summary"`` entry stands for everything before it, so
    entries before the last summary are dropped, and it becomes a user message starting
    with :data:`SUMMARY_PREFIX`. Other kinds (transition markers, judge feedback) keep
    their role and content. An unknown role is sent as ``"user"``.
    """
    selected = entries if node_id is None else [e for e in entries if e.node_id == node_id]
    start = 0
    for index in range(len(selected) - 1, -1, -1):
        if selected[index].kind == "summary":
            start = index
            break
    return [chat_message(entry) for entry in selected[start:]]


def _tokens(message: ChatMessage) -> int:
    return -(-_message_chars(message) // 4) + _MESSAGE_OVERHEAD_TOKENS


class ChatView:
    """A node's conversation entries and their provider messages, kept in step.

    ``messages`` is ``to_chat_messages(entries)`` and ``tokens`` its
    :func:`estimate_tokens`, updated entry by entry, so a turn costs the same at turn 500
    as at turn 10: nothing is rebuilt from the whole conversation except when it is
    compacted. ``entries`` is the node's scope as the conversation projection gives it.
    """

    __slots__ = ("entries", "messages", "tokens")

    def __init__(self, entries: Sequence[ConversationEntry] = ()) -> None:
        self.entries: list[ConversationEntry] = list(entries)
        self.messages: list[ChatMessage] = to_chat_messages(self.entries)
        self.tokens = estimate_tokens(self.messages)

    def append(self, entry: ConversationEntry) -> None:
        """Add one entry at the end (a summary entry replaces every message before it)."""
        self.entries.append(entry)
        message = chat_message(entry)
        if entry.kind == "summary":
            self.messages = [message]
            self.tokens = _tokens(message)
        else:
            self.messages.append(message)
            self.tokens += _tokens(message)

    def compact(self, upto: int, summary: ConversationEntry) -> int:
        """Replace ``messages[:upto]`` (a :func:`plan_compaction` plan) by ``summary``;
        return how many entries that replaced (what ``ConversationCompacted.upto`` counts:
        entries before an earlier summary are not among the messages)."""
        hidden = len(self.entries) - len(self.messages)
        upto_entries = upto + hidden
        self.entries[:upto_entries] = [summary]
        self.messages[:upto] = [chat_message(summary)]
        self.tokens = estimate_tokens(self.messages)
        return upto_entries
