"""Model clients: one registry of the APIs the agent can talk to, by name.

The built-in APIs are rows of a table naming each client class by import path (imported
when a client is made, so this module imports neither SDK nor client), exactly as a
plug-in registers its own (:func:`register_client`, or the ``solforge.model_clients``
entry point naming a callable that registers), so there is one door:

- ``openai``: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang,
  Ollama, OpenRouter, DeepSeek, ...), native tool calls (``openai_client.py``);
- ``anthropic``: Anthropic's messages API, native tool use (``anthropic_client.py``).

The message format and the :class:`~solforge.agents.model.ModelClient` protocol are
``model.py``; retries ``retries.py``; where the settings come from (flags, a config file,
the environment) ``settings.py``.

Not covered: streaming (replies arrive whole), images, the OpenAI Responses API,
server-side tools, prompt caching controls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from solforge.agents.errors import ModelError
from solforge.agents.model import ModelClient, ModelConfig
from solforge.registry import RegistryError, resolve


# -- the registry ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientInfo:
    """A registered API: its client (a ``"module:attr"`` import path or the factory
    itself, called with the :class:`ModelConfig`) and where its key and URL come from."""

    factory: str | Callable[[ModelConfig], ModelClient]
    key_env: str | None = None
    base_url_env: str | None = None
    default_url: str = ""


_CLIENTS: dict[str, ClientInfo] = {
    "openai": ClientInfo("solforge.agents.openai_client:OpenAIClient", "OPENAI_API_KEY",
                         "OPENAI_BASE_URL", "https://api.openai.com/v1"),
    "anthropic": ClientInfo("solforge.agents.anthropic_client:AnthropicClient",
                            "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                            "https://api.anthropic.com"),
}
_LOADED = False


def register_client(api: str, info: ClientInfo) -> None:
    """Make ``api`` usable as ``--api NAME``; plug-ins call this from their entry point."""
    _CLIENTS[api] = info


def registered_clients() -> dict[str, ClientInfo]:
    """The built-in and plug-in APIs (entry points read once)."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        for ep in entry_points(group="solforge.model_clients"):
            try:
                ep.load()()
            except Exception as e:  # a broken plug-in must not hide the built-ins
                print(f"solforge: ignoring model client plug-in {ep.name!r}: {e}",
                      file=sys.stderr)
    return _CLIENTS


def make_client(config: ModelConfig) -> ModelClient:
    """The client for ``config.api``; :class:`ModelError` naming the choices if unknown,
    or what to install or fix when its module does not load."""
    clients = registered_clients()
    if config.api not in clients:
        raise ModelError(f"unknown --api {config.api!r}; use one of: {', '.join(clients)}")
    factory = clients[config.api].factory
    try:
        if isinstance(factory, str):
            factory = resolve(factory, f"model client {config.api!r}")
        return factory(config)
    except ImportError as e:
        raise ModelError(f"the {config.api} client needs its SDK ({e.name}): "
                         "pip install 'solforge[llm]'") from None
    except RegistryError as e:
        raise ModelError(str(e)) from None
