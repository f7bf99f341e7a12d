"""What each model API refuses in a request body, checked on the body a provider encodes.

The scripted provider (``_scripted.py``) encodes every request as both real providers
would and checks each body here, so an offline test fails where a real model would
answer 400: the rules are those of the encoded wire form (blank text blocks, a closing
assistant message, id and name patterns, parameters a model family refuses), not of the
provider-neutral message list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._base import TOOL_NAME
from ._models import anthropic_family, openai_family

__all__ = ["anthropic_body_error", "openai_body_error"]

#: Anthropic's pattern for tool-use ids.
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


def openai_body_error(body: Mapping[str, Any]) -> str | None:
    """Why the chat completions API would refuse ``body``, or None."""
    messages = body.get("messages") or []
    if not any(m.get("role") != "system" for m in messages):
        return "the request has no user or assistant messages"
    family = openai_family(str(body.get("model", "")))
    if not family.sampling and "temperature" in body:
        return f"model {body.get('model')!r} does not support 'temperature'"
    if family.cap_field == "max_completion_tokens" and "max_tokens" in body:
        return f"model {body.get('model')!r} takes 'max_completion_tokens', not 'max_tokens'"
    for tool in body.get("tools") or []:
        name = tool["function"]["name"]
        if not TOOL_NAME.fullmatch(name):
            return f"tools: function name {name!r} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return f"messages.[{index}]: 'tool' must respond to a preceding 'tool_calls'"
            pending.discard(message["tool_call_id"])
            continue
        if pending:
            return (
                f"messages.[{index}]: an assistant message with 'tool_calls' must be followed "
                f"by tool messages answering each id; missing {sorted(pending)}"
            )
        calls = message.get("tool_calls") or []
        pending = {c["id"] for c in calls}
        if len(pending) != len(calls):
            return f"messages.[{index}]: two tool calls with one id"
    if pending:
        return f"tool_call_ids did not have response messages: {sorted(pending)}"
    return None


def anthropic_body_error(body: Mapping[str, Any]) -> str | None:
    """Why the Messages API would refuse ``body``, or None."""
    messages = body.get("messages") or []
    if not messages:
        return "messages: at least one message is required"
    family = anthropic_family(str(body.get("model", "")))
    if not family.sampling and "temperature" in body:
        return f"model {body.get('model')!r} does not support 'temperature'"
    if not family.sampling and messages[-1].get("role") == "assistant":
        return "the conversation ends with an assistant message (a prefill this model refuses)"
    for tool in body.get("tools") or []:
        if not TOOL_NAME.fullmatch(tool["name"]):
            return f"tools: name {tool['name']!r} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
    pending: set[str] = set()
    for index, message in enumerate(messages):
        wanted = "user" if index % 2 == 0 else "assistant"
        if message.get("role") != wanted:
            return f"messages.{index}: roles must alternate from 'user' to 'assistant'"
        blocks = message.get("content") or []
        if not blocks:
            return f"messages.{index}: content must be non-empty"
        refused = _block_error(index, blocks)
        if refused is not None:
            return refused
        answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        if pending - answered:
            return (
                f"messages.{index}: tool_use ids without tool_result blocks right after: "
                f"{sorted(pending - answered)}"
            )
        if answered - pending:
            return f"messages.{index}: a tool_result answers no tool_use of the turn before"
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    if pending:
        return f"the conversation ends with tool_use ids unanswered: {sorted(pending)}"
    return None


def _block_error(index: int, blocks: list[dict[str, Any]]) -> str | None:
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and not str(block.get("text", "")).strip():
            return f"messages.{index}: text content blocks must contain non-whitespace text"
        if kind == "tool_use":
            if not _TOOL_USE_ID.fullmatch(str(block.get("id", ""))):
                return f"messages.{index}: tool_use id {block.get('id')!r} is not [a-zA-Z0-9_-]+"
            if not TOOL_NAME.fullmatch(str(block.get("name", ""))):
                return f"messages.{index}: tool_use name {block.get('name')!r} is refused"
    return None
