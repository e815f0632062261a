"""What the agent says to a model and how it reaches one: the neutral message format
(:class:`Message`, :class:`ToolCall`, :class:`ToolSpec`, :class:`ModelReply`), the
settings of one model (:class:`ModelConfig`) and the :class:`ModelClient` protocol every
client implements. The clients turn this format into their API's wire format
(``openai_client.py``, ``anthropic_client.py``); ``clients.py`` picks one by name.

Not covered: images, streaming (a reply arrives whole).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, SecretStr

from solforge.agents.errors import FormatError
from solforge.agents.pricing import cost_usd, price_of
from solforge.orchestrate.units import Usage


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
