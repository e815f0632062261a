"""Model settings from flags, a config file and the environment, in that order.

- flags: the arguments of :func:`resolve_model_config` (the CLI passes its flags);
- a TOML config file: ``--llm-config``, else ``$SOLFORGE_LLM_CONFIG``, else
  ``~/.config/solforge/llm.toml`` if it exists, with
  :class:`~solforge.agents.clients.ModelConfig`'s fields at the top level and
  ``api_key_env`` naming a variable that holds the key::

      model = "gpt-4.1"
      base_url = "https://openrouter.ai/api/v1"
      api_key_env = "OPENROUTER_API_KEY"
      price_in = 2.0
      price_out = 8.0

- the environment: each registered API's key and URL variables (``OPENAI_API_KEY``,
  ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``).

Whatever is missing raises :class:`~solforge.agents.errors.ModelError` with the one thing
to set. Not covered: several named profiles in one file, keyrings.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import SecretStr

from solforge import env
from solforge.agents.clients import registered_clients
from solforge.agents.errors import ModelError
from solforge.agents.model import ModelConfig


def default_config_file() -> Path | None:
    explicit = env.llm_config()
    if explicit:
        return explicit
    p = Path.home() / ".config" / "solforge" / "llm.toml"
    return p if p.is_file() else None


def _is_local(url: str | None) -> bool:
    if not url:
        return False
    host = urlparse(url).hostname or ""
    if host in ("localhost", "host.docker.internal") or host.endswith(".local"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private or ip.is_link_local


def resolve_model_config(model: str | None = None, api: str | None = None,
                         base_url: str | None = None, api_key: str | None = None,
                         config_file: str | Path | None = None, **overrides: Any
                         ) -> ModelConfig:
    """Settings from arguments, then the config file, then the environment.

    The config file is TOML with :class:`ModelConfig`'s fields at the top level, and
    ``api_key_env`` naming a variable to read the key from. The API defaults to
    ``anthropic`` for models named ``claude*``, else ``openai``. A server on this machine
    or a private network (vLLM, Ollama) needs no key. Raises :class:`ModelError` with the
    one thing to set when something is missing.
    """
    path = Path(config_file).expanduser() if config_file else default_config_file()
    file: dict[str, Any] = {}
    if path is not None:
        if not path.is_file():
            raise ModelError(f"LLM config file {path} does not exist: fix --llm-config or "
                             "$SOLFORGE_LLM_CONFIG")
        try:
            import tomllib  # Python 3.11+
        except ModuleNotFoundError:
            raise ModelError(f"reading {path} needs Python 3.11 or later (tomllib); pass "
                             "the settings as flags or environment variables") from None
        try:
            file = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ModelError(f"LLM config file {path} is not valid TOML: {e}") from None
    model = model or file.get("model")
    if not model:
        raise ModelError("no model given: pass --model (e.g. gpt-4.1, claude-sonnet-4-5, or "
                         "the name your vLLM/Ollama server serves) or set model in the "
                         "LLM config file")
    api = api or file.get("api") or ("anthropic" if model.lower().startswith("claude")
                                     else "openai")
    clients = registered_clients()
    if api not in clients:
        raise ModelError(f"unknown --api {api!r}; use one of: {', '.join(clients)}")
    info = clients[api]
    base_url = base_url or file.get("base_url") or \
        (os.environ.get(info.base_url_env) if info.base_url_env else None) or None
    key = api_key or file.get("api_key")
    if not key and file.get("api_key_env"):
        key = os.environ.get(str(file["api_key_env"]))
    if not key and info.key_env:
        key = os.environ.get(info.key_env)
    if not key:
        if not _is_local(base_url):
            where = base_url or info.default_url or "the default endpoint"
            what = f"set {info.key_env}" if info.key_env else "pass --api-key"
            raise ModelError(f"no API key for {api} at {where}: {what} (or pass --api-key, "
                             "or api_key_env in the LLM config file)")
        key = "not-needed"  # local servers accept any key; the SDKs insist on one
    fields = {k: v for k, v in file.items() if k in ModelConfig.model_fields
              and k not in ("api", "model", "base_url", "api_key")}
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return ModelConfig(api=api, model=model, base_url=base_url, api_key=SecretStr(key),
                       **fields)
