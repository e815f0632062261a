"""OpenAI-compatible chat completions with native tool calls, through the ``openai`` SDK.

Works with any server that speaks ``POST {base_url}/chat/completions`` with ``tools``:
OpenAI, vLLM (start it with ``--enable-auto-tool-choice --tool-call-parser ...``), SGLang,
Ollama (``http://localhost:11434/v1``), OpenRouter, DeepSeek and others.

Not covered: servers without tool calling (the agent needs native tool calls; there is no
text-parsing fallback), streaming, reasoning content that some servers return beside the
answer (it is dropped: the next request does not carry it back).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from solforge.agents.errors import ModelError
from solforge.agents.model import Message, ModelConfig, ModelReply, ToolCall, ToolSpec
from solforge.agents.retries import call_with_retries, classify_sdk_error


def to_openai(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The neutral conversation in chat-completions form."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                msg["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name,
                                                   "arguments": _valid_json(c.arguments)}}
                                     for c in m.tool_calls]
            elif not m.content:
                msg["content"] = ""
            out.append(msg)
        else:
            out.append({"role": "user", "content": m.content})
    return out


def _valid_json(arguments: str) -> str:
    """Arguments as sent back in the history: servers whose chat templates parse them
    (vLLM, SGLang) reject the request when a past call's arguments were not JSON."""
    try:
        json.loads(arguments or "{}")
        return arguments or "{}"
    except json.JSONDecodeError:
        return json.dumps({"unparsable_arguments": arguments[:2000]})


class OpenAIClient:
    """A :class:`~solforge.agents.clients.ModelClient` for chat-completions endpoints."""

    def __init__(self, config: ModelConfig) -> None:
        import openai

        self.config = config
        self._openai = openai
        key = config.api_key.get_secret_value() if config.api_key else None
        self.url = config.base_url or "https://api.openai.com/v1"
        # our own retries (retries.call_with_retries), so every wait is reported
        self._sdk = openai.OpenAI(api_key=key, base_url=config.base_url,
                                  timeout=config.timeout_s, max_retries=0)

    def complete(self, system: str, messages: list[Message], tools: list[ToolSpec],
                 on_retry: Callable[[int, float, str], None] | None = None) -> ModelReply:
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model, "messages": to_openai(system, messages),
            "tools": [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in tools],
        }
        if cfg.max_output_tokens:
            # OpenAI's own newer models take only max_completion_tokens; most compatible
            # servers know max_tokens
            official = "api.openai.com" in self.url
            kwargs["max_completion_tokens" if official else "max_tokens"] = cfg.max_output_tokens
        if cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        if cfg.extra_body:
            kwargs["extra_body"] = cfg.extra_body
        response = call_with_retries(
            lambda: self._sdk.chat.completions.create(**kwargs),
            lambda e: classify_sdk_error(e, self._openai, cfg, "OPENAI_API_KEY", self.url),
            cfg, on_retry)
        if not getattr(response, "choices", None):
            raise ModelError(f"{self.url} answered without a choice: is it a chat-completions "
                             "endpoint? (check --base-url; it usually ends in /v1)")
        choice = response.choices[0]
        msg = choice.message
        calls = []
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            if fn is None:  # a custom (non-function) tool call: not ours
                continue
            args = fn.arguments
            if not isinstance(args, str):  # some servers send an object, not JSON text
                args = json.dumps(args or {})
            calls.append(ToolCall(id=tc.id or f"call_{uuid.uuid4().hex[:16]}", name=fn.name,
                                  arguments=args or "{}"))
        usage = response.usage
        n_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        n_out = int(getattr(usage, "completion_tokens", 0) or 0)
        return ModelReply(
            message=Message(role="assistant", content=msg.content or "", tool_calls=calls),
            usage=cfg.usage(n_in, n_out), stop_reason=choice.finish_reason or "",
            model=getattr(response, "model", "") or cfg.model)
