"""How an HTTP provider reaches its API: one typed settings object both providers take.

:class:`ProviderSettings` holds the key, base URL, model, name and transport settings
(timeouts, retries, answer size) of :class:`OpenAIProvider` and
:class:`AnthropicProvider`; :class:`ProviderOptions` is the same set as keyword arguments
(``OpenAIProvider(model=..., timeout=...)``), which override a settings object's fields.
:func:`resolve` fills what is unset from the environment (``{PREFIX}_API_KEY``,
``{PREFIX}_BASE_URL``, ``{PREFIX}_MODEL``) and the provider's defaults.
"""

from __future__ import annotations

import os
from typing import TypedDict

import msgspec

from .._errors import ProviderError

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "ApiDefaults",
    "ProviderOptions",
    "ProviderSettings",
    "endpoint",
    "resolve",
]

#: The largest answer body a provider reads by default (decompressed): 32 MiB.
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024


class ProviderSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How a provider reaches its API.

    ``api_key``, ``base_url`` and ``model`` unset (None) come from the environment, then
    the provider's defaults (the key's surrounding whitespace is dropped; a missing or
    blank key, or one holding a control or non-ASCII character, is a ProviderError when
    the provider is made);
    ``name`` unset is the provider's (``"openai"``, ``"anthropic"``). ``timeout`` bounds
    each HTTP attempt as a whole (600 s, as the official SDKs: a model may write for
    minutes; connecting takes 5 s at most) and ``deadline`` (None: no bound) the whole call with its
    retries, in seconds; ``max_retries`` attempts follow the first, waiting from
    ``retry_wait_initial`` up to ``retry_wait_max`` seconds between them (or what the
    API asks for, capped by it); ``max_response_bytes`` bounds an answer's body. Its
    ``repr`` never shows the key.
    """

    api_key: str | None = None
    base_url: str | None = None
    model: str | None = None
    name: str | None = None
    timeout: float = 600.0
    max_retries: int = 3
    retry_wait_initial: float = 0.5
    retry_wait_max: float = 20.0
    deadline: float | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __repr__(self) -> str:
        fields = msgspec.structs.asdict(self)
        if fields["api_key"] is not None:
            fields["api_key"] = "***"
        return f"ProviderSettings({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


class ProviderOptions(TypedDict, total=False):
    """:class:`ProviderSettings`' fields as a provider's keyword arguments."""

    api_key: str | None
    base_url: str | None
    model: str | None
    name: str | None
    timeout: float
    max_retries: int
    retry_wait_initial: float
    retry_wait_max: float
    deadline: float | None
    max_response_bytes: int


class ApiDefaults(msgspec.Struct, frozen=True):
    """What one API's provider falls back on: its environment variables' prefix (``env``),
    its name, base URL and default model."""

    env: str
    name: str
    base_url: str
    model: str


def resolve(
    settings: ProviderSettings | None, options: ProviderOptions, defaults: ApiDefaults
) -> ProviderSettings:
    """``settings`` with ``options`` applied and nothing left unset: the key, base URL
    (its path without a trailing ``/``, its query kept: see :func:`endpoint`) and model
    from the arguments, else the ``{env}_API_KEY``, ``{env}_BASE_URL`` and
    ``{env}_MODEL`` environment variables, else ``defaults`` (a key has none: its
    absence, or one of spaces only, raises ProviderError). The key is
    taken without surrounding whitespace; one holding a control or non-ASCII character
    (which httpx would refuse, quoting the key) raises ProviderError, which never shows
    the key."""
    env, name, base_url, model = defaults.env, defaults.name, defaults.base_url, defaults.model
    given = msgspec.structs.replace(settings or ProviderSettings(), **options)
    named = given.name or name
    key = given.api_key if given.api_key is not None else os.environ.get(f"{env}_API_KEY")
    # A key pasted with its line ending ("\r\n" from a .env file) is the key without it.
    key = key.strip() if key else key
    if not key:  # a blank key is none: refused here, not by the API's 401
        raise ProviderError(
            named,
            f"no API key: pass api_key=... or set the {env}_API_KEY environment variable",
        )
    odd = next((i for i, c in enumerate(key) if not " " <= c <= "~"), None)
    if odd is not None:  # httpx would quote the whole header (the key) in its error
        raise ProviderError(
            named,
            f"the API key holds U+{ord(key[odd]):04X} at position {odd}, a control or "
            f"non-ASCII character no API key has: check api_key=... or {env}_API_KEY",
        )
    url = given.base_url or os.environ.get(f"{env}_BASE_URL") or base_url
    return msgspec.structs.replace(
        given,
        api_key=key,
        base_url=endpoint(url, ""),
        model=given.model or os.environ.get(f"{env}_MODEL") or model,
        name=named,
    )


def endpoint(base_url: str, path: str) -> str:
    """The URL of the API's ``path`` (``"/chat/completions"``) under ``base_url``: the
    path goes after the base's path and before its query, which is kept (an Azure-style
    ``...?api-version=...``); a fragment, never sent, is dropped."""
    base, mark, query = base_url.partition("#")[0].partition("?")
    return f"{base.rstrip('/')}{path}{mark}{query}"
