"""Model clients: one protocol, the message types the agent speaks, and one registry.

The agent talks to every model through :class:`ModelClient` in a neutral message format
(:class:`Message`, :class:`ToolCall`); each client turns it into its API's wire format
with the vendor's official SDK. The built-in APIs are registered exactly as a plug-in
registers its own (:func:`register_client`, or the ``solforge.model_clients`` entry point
naming a callable that registers), so there is one door:

- ``openai``: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang,
  Ollama, OpenRouter, DeepSeek, ...), native tool calls (``openai_client.py``);
- ``anthropic``: Anthropic's messages API, native tool use (``anthropic_client.py``).

Where the settings come from (flags, a config file, the environment) is
``settings.py``. Retries (429, 5xx, connection errors,
timeouts) are done here with exponential backoff and jitter, honouring ``Retry-After``;
the SDKs' own retries are off so every wait is visible to the caller.

Not covered: streaming (replies arrive whole), images, the OpenAI Responses API,
server-side tools, prompt caching controls.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field, SecretStr

from solforge.agents.errors import ContextTooLong, FormatError, ModelError
from solforge.agents.pricing import cost_usd, price_of
from solforge.orchestrate.units import Usage

T = TypeVar("T")


# -- the neutral message format -----------------------------------------------------------
class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class ToolCall(BaseModel):
    """One tool call of an assistant turn; ``arguments`` is the JSON text as received."""

    id: str = Field(default_factory=lambda: f"call_{uuid.uuid4().hex[:16]}")
    name: str
    arguments: str = "{}"

    def parsed(self) -> dict[str, Any]:
        """The arguments as a dict; :class:`FormatError` saying how to fix them if not."""
        text = (self.arguments or "").strip() or "{}"
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise FormatError(
                f"the arguments of {self.name} are not valid JSON ({e.msg} at char {e.pos}):"
                f" {text[:200]!r}. Send one JSON object, e.g. {{\"path\": \"solution.py\"}}."
            ) from None
        if not isinstance(value, dict):
            raise FormatError(f"the arguments of {self.name} must be a JSON object, got "
                              f"{type(value).__name__}")
        return value


class Message(BaseModel):
    """A turn of the conversation (the system prompt travels separately)."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None   # role "tool": the call it answers
    name: str | None = None           # role "tool": the tool's name


class ModelReply(BaseModel):
    """The assistant's turn, what it cost, and why it stopped (``length``: cut short)."""

    message: Message
    usage: Usage
    stop_reason: str = ""
    model: str = ""


# -- configuration ------------------------------------------------------------------------
class ModelConfig(BaseModel):
    """How to reach one model. The key is a secret: never written to disk by solforge."""

    api: str = Field("openai", description="a registered client: openai, anthropic, plug-ins")
    model: str = Field(description="the model name the endpoint serves")
    base_url: str | None = Field(None, description="endpoint; None: the vendor's default")
    api_key: SecretStr | None = Field(None, description="the key (flags, config file, env)")
    timeout_s: float = Field(600.0, description="per-request timeout")
    max_retries: int = Field(6, ge=0, description="retries on 429, 5xx, connection errors")
    backoff_s: float = Field(1.0, ge=0, description="first wait; doubles each retry, jittered")
    backoff_max_s: float = Field(60.0, ge=0, description="longest single wait")
    max_output_tokens: int | None = Field(
        None, description="reply limit (None: the server's default; Anthropic needs one: 8192)")
    temperature: float | None = Field(None, description="sampling temperature (None: default)")
    price_in: float | None = Field(None, description="$ per million input tokens (overrides)")
    price_out: float | None = Field(None, description="$ per million output tokens (overrides)")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="vendor options sent as they are (reasoning_effort,..)")

    def prices(self) -> tuple[float, float] | None:
        if self.price_in is not None and self.price_out is not None:
            return self.price_in, self.price_out
        return price_of(self.model)

    def usage(self, input_tokens: int, output_tokens: int) -> Usage:
        return Usage(input_tokens=input_tokens, output_tokens=output_tokens, calls=1,
                     cost_usd=cost_usd(input_tokens, output_tokens, self.prices()))

    def public(self) -> dict[str, Any]:
        """The settings without the key (for trajectories, run specs and logs)."""
        return self.model_dump(mode="json", exclude={"api_key"})


class ModelClient(Protocol):
    """Anything that can take one turn of a tool-calling conversation."""

    config: ModelConfig

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec],
                 on_retry: Callable[[int, float, str], None] | None = None) -> ModelReply:
        """The assistant's next turn; raises :class:`ModelError` (or
        :class:`ContextTooLong`) when the endpoint cannot answer."""
        ...


# -- the registry ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientInfo:
    """A registered API: its factory and where its key and URL come from."""

    factory: Callable[[ModelConfig], ModelClient]
    key_env: str | None = None
    base_url_env: str | None = None
    default_url: str = ""


_CLIENTS: dict[str, ClientInfo] = {}
_LOADED = False


def register_client(api: str, info: ClientInfo) -> None:
    """Make ``api`` usable as ``--api NAME``; plug-ins call this from their entry point."""
    _CLIENTS[api] = info


def _openai_factory(config: ModelConfig) -> ModelClient:
    from solforge.agents.openai_client import OpenAIClient

    return OpenAIClient(config)


def _anthropic_factory(config: ModelConfig) -> ModelClient:
    from solforge.agents.anthropic_client import AnthropicClient

    return AnthropicClient(config)


def registered_clients() -> dict[str, ClientInfo]:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        register_client("openai", ClientInfo(_openai_factory, "OPENAI_API_KEY",
                                             "OPENAI_BASE_URL", "https://api.openai.com/v1"))
        register_client("anthropic", ClientInfo(_anthropic_factory, "ANTHROPIC_API_KEY",
                                                "ANTHROPIC_BASE_URL",
                                                "https://api.anthropic.com"))
        for ep in entry_points(group="solforge.model_clients"):
            try:
                ep.load()()
            except Exception as e:  # a broken plug-in must not hide the built-ins
                import sys

                print(f"solforge: ignoring model client plug-in {ep.name!r}: {e}",
                      file=sys.stderr)
    return _CLIENTS


def make_client(config: ModelConfig) -> ModelClient:
    """The client for ``config.api``; :class:`ModelError` naming the choices if unknown."""
    clients = registered_clients()
    if config.api not in clients:
        raise ModelError(f"unknown --api {config.api!r}; use one of: {', '.join(clients)}")
    try:
        return clients[config.api].factory(config)
    except ImportError as e:
        raise ModelError(f"the {config.api} client needs its SDK ({e.name}): "
                         "pip install 'solforge[llm]'") from None


# -- retries ------------------------------------------------------------------------------------
@dataclass
class Failure:
    """How a client classifies an SDK exception: retry it, trim the context, or give up."""

    kind: Literal["retry", "context", "fatal"]
    message: str
    retry_after: float | None = None


def classify_sdk_error(exc: Exception, sdk: Any, config: ModelConfig, key_env: str | None,
                       url: str) -> Failure | None:
    """Classify an exception of the ``openai`` or ``anthropic`` SDK (same class names).

    None for exceptions that are not the SDK's (bugs of ours: let them raise).
    """
    if isinstance(exc, sdk.APITimeoutError):
        return Failure("retry", f"no answer from {url} within {config.timeout_s:g} s")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc
        return Failure("retry", f"cannot reach {url} ({cause}): check --base-url "
                       "and that the server is up")
    if not isinstance(exc, sdk.APIStatusError):
        return None
    status = exc.status_code
    detail = _error_detail(exc)
    where = f"HTTP {status} from {url}"
    if status == 429 or status >= 500:
        return Failure("retry", f"{where}: {detail}", _retry_after(exc))
    low = detail.lower()
    if status in (400, 413) and any(s in low for s in (
            "context length", "context_length", "maximum context", "prompt is too long",
            "too many tokens", "context window", "input is too long")):
        return Failure("context", f"{where}: {detail}")
    if status in (401, 403):
        fix = f"check {key_env} or --api-key" if key_env else "check --api-key"
        return Failure("fatal", f"{where}: the key was refused ({detail}): {fix}")
    if status == 404:
        return Failure("fatal", f"{where}: {detail}: check --model ({config.model!r}) and "
                       "--base-url")
    return Failure("fatal", f"{where}: {detail}")


def _error_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if body.get("message"):
            return str(body["message"])[:500]
    return str(getattr(exc, "message", "") or exc)[:500]


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue  # an HTTP date: fall back to our own backoff
    return None


def call_with_retries(fn: Callable[[], T], classify: Callable[[Exception], Failure | None],
                      config: ModelConfig,
                      on_retry: Callable[[int, float, str], None] | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, retried on retryable failures with exponential backoff and jitter.

    Raises :class:`ContextTooLong` at once for a context-length rejection and
    :class:`ModelError` for anything fatal or still failing after ``max_retries``.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as e:
            failure = classify(e)
            if failure is None:
                raise
            if failure.kind == "context":
                raise ContextTooLong(failure.message) from None
            if failure.kind == "fatal":
                raise ModelError(failure.message) from None
            if attempt >= config.max_retries:
                raise ModelError(f"{failure.message} (gave up after {attempt + 1} attempts)"
                                 ) from None
            wait = config.backoff_s * 2 ** attempt * (0.5 + random.random() / 2)
            if failure.retry_after is not None:
                wait = max(wait, failure.retry_after)
            wait = min(wait, config.backoff_max_s)
            if on_retry is not None:
                on_retry(attempt + 1, wait, failure.message)
            sleep(wait)
            attempt += 1
