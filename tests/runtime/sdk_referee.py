"""The official SDKs as referee of the providers' wire format, over loopback.

:func:`check` validates a request body against an SDK's request parameter types
(TypedDicts), strictly: an unknown key, a missing required key or a value of the wrong
shape is a violation. :class:`SdkOpenAIServer` and :class:`SdkAnthropicServer` check every
body they receive that way (a violation is recorded and answered 400) and answer with
bodies built from the SDK's response models, with fields the project does not know
added. Their model answers by the request's system prompt (judge, router, verifier,
goal scoring, branch judge) or, for a node's turn, by how far its conversation is:
three parallel tool calls, then ``set_output``, then a text.
"""

from __future__ import annotations

import collections.abc as cabc
import itertools
import json
import types
import typing
from typing import Any

import anthropic.types as anthropic_types
import openai.types.chat as openai_chat
import openai.types.shared as openai_shared
import typing_extensions as te
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params

from .llm_servers import AnthropicServer, OpenAIServer, Received, Scripted


def _is_typeddict(tp: Any) -> bool:
    return te.is_typeddict(tp)


def _required(hint: Any, *, total: bool) -> bool:
    while typing.get_origin(hint) in (typing.Annotated, te.Annotated):
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin in (te.Required, typing.Required):
        return True
    if origin in (te.NotRequired, typing.NotRequired):
        return False
    return total


def check(value: Any, tp: Any, path: str = "$") -> str | None:
    """Why value does not fit the SDK param type tp (strictly: no unknown keys), else None."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return None
    if origin in (typing.Annotated, te.Annotated):
        return check(value, args[0], path)
    if origin in (te.Required, te.NotRequired, typing.Required, typing.NotRequired):
        return check(value, args[0], path)
    if origin in (typing.Union, types.UnionType):
        errors = [check(value, a, path) for a in args]
        if any(e is None for e in errors):
            return None
        return " | ".join(e for e in errors if e)[:600]
    if origin in (typing.Literal, te.Literal):
        return None if value in args else f"{path}: {value!r} not in {args}"
    if tp is type(None):
        return None if value is None else f"{path}: expected null"
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return f"{path}: expected an object for {tp.__name__}"
        hints = typing.get_type_hints(tp, include_extras=True)
        keys = {}
        for name, hint in hints.items():
            alias = name
            if typing.get_origin(hint) in (typing.Annotated, te.Annotated):
                for meta in typing.get_args(hint)[1:]:
                    alias = getattr(meta, "alias", None) or alias
            keys[alias] = hint
        unknown = set(value) - set(keys)
        if unknown:
            return f"{path}: unknown keys {sorted(unknown)} for {tp.__name__}"
        # The SDKs' modules defer their annotations, which hides Required[...] from
        # __required_keys__ on Python 3.11: read it from the resolved hints.
        required = {
            name
            for name, hint in hints.items()
            if _required(hint, total=getattr(tp, "__total__", True))
        }
        missing = required - set(value)
        if missing:
            return f"{path}: missing {sorted(missing)} for {tp.__name__}"
        for key, item in value.items():
            err = check(item, keys[key], f"{path}.{key}")
            if err:
                return err
        return None
    if origin in (list, cabc.Iterable, cabc.Sequence, typing.Iterable, typing.Sequence) or (
        origin is not None and getattr(origin, "__name__", "") == "SequenceNotStr"
    ):
        if not isinstance(value, list):
            return f"{path}: expected a list"
        for i, item in enumerate(value):
            err = check(item, args[0] if args else Any, f"{path}[{i}]")
            if err:
                return err
        return None
    if origin in (dict, cabc.Mapping, dict):
        return None if isinstance(value, dict) else f"{path}: expected an object"
    if tp is str:
        return None if isinstance(value, str) else f"{path}: expected a string"
    if tp is bool:
        return None if isinstance(value, bool) else f"{path}: expected a bool"
    if tp is int:
        return (
            None
            if isinstance(value, int) and not isinstance(value, bool)
            else f"{path}: expected an int"
        )
    if tp is float:
        return (
            None
            if isinstance(value, int | float) and not isinstance(value, bool)
            else f"{path}: expected a number"
        )
    if isinstance(tp, te.TypeAliasType):
        return check(value, tp.__value__, path)
    if isinstance(tp, type) and hasattr(tp, "__name__") and tp.__name__ == "SequenceNotStr":
        return None if isinstance(value, list) else f"{path}: expected a list"
    if isinstance(tp, type) and hasattr(tp, "model_fields"):
        # A response model accepted in place of a param: a body is checked as params.
        return f"{path}: {tp.__name__} is a response model, not a request param"
    raise TypeError(f"{path}: the referee cannot check {tp!r}")


# ---------------------------------------------------------------------------------------
# The model behind the servers


#: Answers by the system prompt's opening words: each check's own prompt.
VERDICTS = {
    "You are a strict quality judge": '{"verdict": "ACCEPT", "confidence": 0.9, "feedback": ""}',
    "You route an agent graph": '{"target": "ship", "reasoning": "it fits"}',
    "You are a strict evaluator": '{"score": 0.9, "reasoning": "clear"}',
    "You assess whether a finished job": '{"score": 0.8, "reasoning": "met"}',
    "You compare candidate responses": "Response 2",
}
#: A node's first turn: two searches and a tool that fails, in parallel.
FIRST_CALLS = [("search", {"query": "a"}), ("search", {"query": "b"}), ("broken", {})]
_ids = itertools.count(1)


def decide(system: str, assistant_turns: int) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The model's answer (text, tool calls) to a request."""
    for opening, text in VERDICTS.items():
        if opening in system:
            return text, []
    if assistant_turns == 0:
        return "", FIRST_CALLS
    if assistant_turns == 1:
        return "", [("set_output", {"key": "answer", "value": "done"})]
    return "Finished.", []


class SdkOpenAIServer(OpenAIServer):
    """Chat completions checked by the openai SDK's types; answers are its models."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def check(self, request: Received) -> Scripted | None:
        refused = super().check(request)
        if refused is not None:
            self.violations.append(f"project check: {refused.body}")
            return refused
        error = check(request.body, completion_create_params.CompletionCreateParamsNonStreaming)
        if error is not None:
            self.violations.append(error)
            return Scripted(status=400, body=self.error_body(400, error))
        with self._lock:
            if self._queue:
                return None
        return Scripted(body=self.answer(request.body))

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        turns = sum(m["role"] == "assistant" for m in messages)
        text, calls = decide(system, turns)
        return openai_answer(text, calls, model=body["model"])


def openai_answer(
    text: str | None,
    calls: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
    *,
    model: str = "gpt-5.4-mini-2026-03-17",
    finish_reason: str | None = None,
    refusal: str | None = None,
    raw_arguments: str | None = None,
) -> dict[str, Any]:
    """A chat completion validated by the SDK's ChatCompletion, with unknown fields."""
    tool_calls = [
        {
            "id": f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": name, "arguments": raw_arguments or json.dumps(args)},
        }
        for name, args in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = tool_calls
    completion = openai_chat.ChatCompletion.model_validate(
        {
            "id": "chatcmpl-contract",
            "object": "chat.completion",
            "created": 1790000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": 40,
                "completion_tokens": 8,
                "total_tokens": 48,
                "prompt_tokens_details": {"cached_tokens": 32, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 4},
            },
            "service_tier": "default",
            "system_fingerprint": "fp_contract",
        }
    )
    data = completion.model_dump(mode="json")
    data["a_field_from_the_future"] = {"nested": [1, 2]}
    data["choices"][0]["message"]["annotations"] = []
    data["choices"][0]["message"]["also_new"] = "ignored"
    return data


class SdkAnthropicServer(AnthropicServer):
    """Messages checked by the anthropic SDK's types; answers are its models."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def check(self, request: Received) -> Scripted | None:
        refused = super().check(request)
        if refused is not None:
            self.violations.append(f"project check: {refused.body}")
            return refused
        error = check(request.body, message_create_params.MessageCreateParamsNonStreaming)
        if error is not None:
            self.violations.append(error)
            return Scripted(status=400, body=self.error_body(400, error))
        with self._lock:
            if self._queue:
                return None
        return Scripted(body=self.answer(request.body))

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        turns = sum(m["role"] == "assistant" for m in body["messages"])
        text, calls = decide(str(body.get("system", "")), turns)
        return anthropic_answer(text, calls, model=body["model"])


def anthropic_answer(
    text: str,
    calls: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
    *,
    model: str = "claude-haiku-5-5",
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """A Messages answer validated by the SDK's Message, with a thinking block (which
    the project ignores) and unknown fields."""
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "Let me see.", "signature": "sig"}
    ]
    if text:
        content.append({"type": "text", "text": text, "citations": None})
    content += [
        {"type": "tool_use", "id": f"toolu_{next(_ids)}", "name": name, "input": args}
        for name, args in calls
    ]
    message = anthropic_types.Message.model_validate(
        {
            "id": "msg_contract",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason or ("tool_use" if calls else "end_turn"),
            "stop_sequence": None,
            "usage": {
                "input_tokens": 40,
                "output_tokens": 8,
                "cache_read_input_tokens": 30,
                "cache_creation_input_tokens": 5,
                "service_tier": "standard",
            },
        }
    )
    data = message.model_dump(mode="json")
    data["a_field_from_the_future"] = {"nested": True}
    data["usage"]["also_new"] = 3
    return data


# ---------------------------------------------------------------------------------------
# Error answers built from the SDKs' own error models

#: The Anthropic error object each status answers with (its docs' table; the rest api_error).
_ANTHROPIC_ERRORS: dict[int, type[Any]] = {
    400: anthropic_types.InvalidRequestErrorObject,
    404: anthropic_types.NotFoundErrorObject,
    429: anthropic_types.RateLimitErrorObject,
    504: anthropic_types.GatewayTimeoutErrorObject,
    529: anthropic_types.OverloadedErrorObject,
}

#: OpenAI's error ``type`` and ``code`` by status, as its API answers them.
_OPENAI_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", "unsupported_parameter"),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout", None),
    409: ("invalid_request_error", "conflict"),
    429: ("requests", "rate_limit_exceeded"),
}

_request_ids = itertools.count(1)


def anthropic_error(
    status: int, message: str = "try later", *, headers: dict[str, str] | None = None
) -> Scripted:
    """An Anthropic error answer: an ``anthropic.types.ErrorResponse`` (validated by the
    SDK) with its request id in the body and the ``request-id`` header, and a field the
    project does not know."""
    request_id = f"req_{next(_request_ids):024d}"
    error = _ANTHROPIC_ERRORS.get(status, anthropic_types.APIErrorObject)
    kind = error.model_fields["type"].annotation.__args__[0]
    response = anthropic_types.ErrorResponse.model_validate(
        {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    )
    body = {**response.model_dump(mode="json"), "unknown_extra": {"since": "a newer API"}}
    return Scripted(status=status, body=body, headers={"request-id": request_id, **(headers or {})})


def openai_error(
    status: int, message: str = "try later", *, headers: dict[str, str] | None = None
) -> Scripted:
    """An OpenAI error answer: ``{"error": openai.types.shared.ErrorObject}`` (validated by
    the SDK, ``param`` included) with the ``x-request-id`` header, and a field the project
    does not know."""
    request_id = f"req_{next(_request_ids):032x}"
    kind, code = _OPENAI_ERRORS.get(status, ("server_error", None))
    error = openai_shared.ErrorObject.model_validate(
        {"message": message, "type": kind, "code": code, "param": None}
    )
    body = {"error": {**error.model_dump(mode="json", exclude_none=False), "unknown": 1}}
    return Scripted(
        status=status, body=body, headers={"x-request-id": request_id, **(headers or {})}
    )


def error_fields(answer: Scripted) -> tuple[str, str | None, str]:
    """The error type, code and request id an SDK error answer carries (the request id
    from its header, else from Anthropic's body)."""
    body = answer.body
    headers = answer.headers
    request_id = headers.get("request-id") or headers.get("x-request-id") or body["request_id"]
    return body["error"]["type"], body["error"].get("code"), request_id
