"""Anthropic's messages API with native tool use, through the ``anthropic`` SDK.

The neutral conversation maps onto Anthropic's alternating turns: an assistant turn's
tool calls become ``tool_use`` blocks, and the tool results that answer them (plus any
user text that follows) become one user turn of ``tool_result`` (and ``text``) blocks.

Not covered: extended thinking (its signed blocks would have to be sent back), prompt
caching breakpoints, streaming, the batch API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from solforge.agents.model import Message, ModelConfig, ModelReply, ToolCall, ToolSpec
from solforge.agents.retries import call_with_retries, classify_sdk_error

DEFAULT_MAX_TOKENS = 8192  # the API requires a reply limit; this fits every current model


def to_anthropic(messages: list[Message]) -> list[dict[str, Any]]:
    """The neutral conversation as Anthropic message dicts (system prompt apart)."""
    out: list[dict[str, Any]] = []

    def user_blocks() -> list[dict[str, Any]]:
        # tool results and user text that follow one another share one user turn
        if out and out[-1]["role"] == "user":
            return out[-1]["content"]
        out.append({"role": "user", "content": []})
        return out[-1]["content"]

    for m in messages:
        if m.role == "tool":
            user_blocks().append({"type": "tool_result", "tool_use_id": m.tool_call_id,
                                  "content": m.content or "(no output)"})
        elif m.role == "user":
            user_blocks().append({"type": "text", "text": m.content or "(empty)"})
        else:
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                try:
                    args = json.loads(c.arguments or "{}")
                except json.JSONDecodeError:
                    args = {}
                blocks.append({"type": "tool_use", "id": c.id, "name": c.name,
                               "input": args if isinstance(args, dict) else {}})
            out.append({"role": "assistant",
                        "content": blocks or [{"type": "text", "text": "(empty)"}]})
    return out


class AnthropicClient:
    """A :class:`~solforge.agents.clients.ModelClient` for Anthropic's messages API."""

    def __init__(self, config: ModelConfig) -> None:
        import anthropic

        self.config = config
        self._anthropic = anthropic
        key = config.api_key.get_secret_value() if config.api_key else None
        self.url = config.base_url or "https://api.anthropic.com"
        self._sdk = anthropic.Anthropic(api_key=key, base_url=config.base_url,
                                        timeout=config.timeout_s, max_retries=0)

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec],
                 on_retry: Callable[[int, float, str], None] | None = None) -> ModelReply:
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model, "max_tokens": cfg.max_output_tokens or DEFAULT_MAX_TOKENS,
            "messages": to_anthropic(messages),
            "tools": [{"name": t.name, "description": t.description,
                       "input_schema": t.parameters} for t in tools],
        }
        if system:
            kwargs["system"] = system
        extra = dict(cfg.extra_body)
        if cfg.temperature is not None:
            extra["temperature"] = cfg.temperature
        if extra:
            kwargs["extra_body"] = extra
        response = call_with_retries(
            lambda: self._sdk.messages.create(**kwargs),
            lambda e: classify_sdk_error(e, self._anthropic, cfg, "ANTHROPIC_API_KEY",
                                         self.url),
            cfg, on_retry)
        texts, calls = [], []
        for block in response.content or []:
            kind = getattr(block, "type", "")
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                calls.append(ToolCall(id=block.id, name=block.name,
                                      arguments=json.dumps(block.input or {})))
        u = response.usage
        n_in = sum(int(getattr(u, f, 0) or 0) for f in (
            "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        n_out = int(getattr(u, "output_tokens", 0) or 0)
        stop = response.stop_reason or ""
        return ModelReply(
            message=Message(role="assistant", content="\n".join(texts), tool_calls=calls),
            usage=cfg.usage(n_in, n_out), stop_reason="length" if stop == "max_tokens" else stop,
            model=getattr(response, "model", "") or cfg.model)
