"""The model clients against real HTTP on loopback: formats, usage, retries, clear errors."""

from __future__ import annotations

import socket

import pytest
from pydantic import SecretStr

from solforge.agents import pricing
from solforge.agents.clients import ClientInfo, make_client, register_client
from solforge.agents.model import Message, ModelConfig, ToolCall, ToolSpec
from solforge.agents.errors import ContextTooLong, FormatError, ModelError
from solforge.agents.settings import resolve_model_config
from tests.agents.conftest import model_config
from tests.agents.loopback import HttpError, Reply, ScriptedServer

TOOLS = [ToolSpec(name="read_file", description="read", parameters={
    "type": "object", "properties": {"path": {"type": "string"}}, "required": []})]


def conversation() -> list[Message]:
    call = ToolCall(id="call_1", name="read_file", arguments='{"path": "problem.py"}')
    return [Message(role="user", content="task"),
            Message(role="assistant", content="reading", tool_calls=[call]),
            Message(role="tool", tool_call_id="call_1", name="read_file", content="FILE"),
            Message(role="user", content="reminder")]


def test_openai_round_trip_tool_calls_and_usage():
    with ScriptedServer([Reply("thinking", [("read_file", {"path": "problem.py"})],
                               input_tokens=1000, output_tokens=500)]) as s:
        client = make_client(model_config(s.base_url))
        reply = client.complete("SYSTEM", conversation(), TOOLS)
    body = s.requests[0].body
    assert s.requests[0].path == "/v1/chat/completions"
    assert body["messages"][0] == {"role": "system", "content": "SYSTEM"}
    assert body["messages"][2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": "FILE"}
    assert body["tools"][0]["function"]["name"] == "read_file"
    assert reply.message.content == "thinking"
    assert reply.message.tool_calls[0].parsed() == {"path": "problem.py"}
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 500)
    assert reply.usage.cost_usd == pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6)


def test_anthropic_round_trip_tool_use_blocks():
    with ScriptedServer([Reply("ok", [("read_file", {"path": "solution.py"})])]) as s:
        client = make_client(model_config(s.root_url, api="anthropic"))
        reply = client.complete("SYSTEM", conversation(), TOOLS)
    req = s.requests[0]
    assert req.path == "/v1/messages"
    assert req.body["system"] == "SYSTEM" and req.body["max_tokens"] > 0
    msgs = req.body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"][1] == {"type": "tool_use", "id": "call_1", "name": "read_file",
                                     "input": {"path": "problem.py"}}
    # the tool result and the user text that follows share one user turn
    assert [b["type"] for b in msgs[2]["content"]] == ["tool_result", "text"]
    assert req.body["tools"][0]["input_schema"]["type"] == "object"
    assert reply.message.tool_calls[0].name == "read_file"
    assert reply.message.tool_calls[0].parsed() == {"path": "solution.py"}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_429_and_500_are_retried_with_backoff(api):
    script = [HttpError(429, "slow down", {"retry-after": "0.02"}), HttpError(500, "boom"),
              Reply("fine")]
    retries = []
    with ScriptedServer(script) as s:
        url = s.base_url if api == "openai" else s.root_url
        client = make_client(model_config(url, api=api))
        reply = client.complete("", [Message(role="user", content="x")], TOOLS,
                                on_retry=lambda n, wait, why: retries.append((n, wait, why)))
    assert reply.message.content == "fine"
    assert [r[0] for r in retries] == [1, 2]
    assert retries[0][1] >= 0.02  # Retry-After honoured
    assert "HTTP 429" in retries[0][2] and "HTTP 500" in retries[1][2]


def test_persistent_500_gives_one_clear_line():
    with ScriptedServer([HttpError(500, "overloaded")] * 4) as s:
        client = make_client(model_config(s.base_url, max_retries=3))
        with pytest.raises(ModelError) as e:
            client.complete("", [Message(role="user", content="x")], TOOLS)
    assert "HTTP 500" in e.value.message and "gave up after 4 attempts" in e.value.message
    assert "\n" not in e.value.message


def test_unreachable_endpoint_says_what_to_check():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = make_client(model_config(f"http://127.0.0.1:{port}/v1", max_retries=1))
    with pytest.raises(ModelError) as e:
        client.complete("", [Message(role="user", content="x")], TOOLS)
    assert f"cannot reach http://127.0.0.1:{port}/v1" in e.value.message
    assert "--base-url" in e.value.message


def test_refused_key_is_not_retried():
    with ScriptedServer([HttpError(401, "invalid api key")]) as s:
        client = make_client(model_config(s.base_url))
        with pytest.raises(ModelError) as e:
            client.complete("", [Message(role="user", content="x")], TOOLS)
    assert len(s.requests) == 1
    assert "OPENAI_API_KEY" in e.value.message


def test_context_length_rejection_is_recognised():
    with ScriptedServer([], max_body=10) as s:
        client = make_client(model_config(s.base_url))
        with pytest.raises(ContextTooLong):
            client.complete("", [Message(role="user", content="x" * 100)], TOOLS)


def test_malformed_arguments_raise_format_error():
    with pytest.raises(FormatError, match="not valid JSON"):
        ToolCall(name="write_file", arguments='{"path": "a.py", "content": ').parsed()
    with pytest.raises(FormatError, match="JSON object"):
        ToolCall(name="write_file", arguments="[1, 2]").parsed()


# -- settings -----------------------------------------------------------------------------------
@pytest.fixture()
def clean_env(monkeypatch, tmp_path):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL", "SOLFORGE_LLM_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/solforge/llm.toml
    return monkeypatch


def test_missing_key_names_the_variable(clean_env):
    with pytest.raises(ModelError, match="set OPENAI_API_KEY"):
        resolve_model_config("gpt-4.1")
    with pytest.raises(ModelError, match="set ANTHROPIC_API_KEY"):
        resolve_model_config("claude-sonnet-4-5")
    with pytest.raises(ModelError, match="--model"):
        resolve_model_config(None)
    with pytest.raises(ModelError, match="unknown --api"):
        resolve_model_config("m", api="nope")


def test_local_servers_need_no_key(clean_env):
    cfg = resolve_model_config("qwen", base_url="http://localhost:8000/v1")
    assert cfg.api == "openai" and cfg.api_key is not None


def test_flags_beat_config_file_beat_environment(clean_env, tmp_path):
    clean_env.setenv("OPENAI_API_KEY", "from-env")
    clean_env.setenv("OPENAI_BASE_URL", "https://env.example/v1")
    clean_env.setenv("MY_KEY", "from-file-env")
    f = tmp_path / "llm.toml"
    f.write_text('model = "gpt-4.1"\nbase_url = "https://file.example/v1"\n'
                 'api_key_env = "MY_KEY"\nprice_in = 0.5\nprice_out = 1.5\nmax_retries = 2\n')
    cfg = resolve_model_config(config_file=f)
    assert (cfg.model, cfg.base_url, cfg.max_retries) == ("gpt-4.1", "https://file.example/v1", 2)
    assert cfg.api_key.get_secret_value() == "from-file-env"
    assert cfg.prices() == (0.5, 1.5)
    cfg = resolve_model_config("gpt-4o", base_url="https://flag.example/v1", api_key="flag",
                               config_file=f)
    assert (cfg.model, cfg.base_url) == ("gpt-4o", "https://flag.example/v1")
    assert cfg.api_key.get_secret_value() == "flag"
    assert "api_key" not in cfg.public()
    clean_env.setenv("SOLFORGE_LLM_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model_config("gpt-4.1")


def test_prices_known_unknown_and_overridden():
    assert pricing.price_of("gpt-4o-mini-2024-07-18") == (0.15, 0.60)
    assert pricing.price_of("gpt-4o") == (2.50, 10.00)
    assert pricing.price_of("claude-sonnet-4-5-20250929") == (3.00, 15.00)
    assert pricing.price_of("my-finetune") is None
    cfg = ModelConfig(model="my-finetune")
    assert cfg.usage(10, 10).cost_usd is None
    assert ModelConfig(model="my-finetune", price_in=0, price_out=0).usage(10, 10).cost_usd == 0


class PathEcho:
    """A client a test registers by import path."""

    def __init__(self, config):
        self.config = config


def test_plugins_register_through_the_same_door():
    class Echo:
        def __init__(self, config):
            self.config = config

    register_client("echo-test", ClientInfo(Echo, key_env=None))
    client = make_client(ModelConfig(api="echo-test", model="m", api_key=SecretStr("k")))
    assert isinstance(client, Echo)
    with pytest.raises(ModelError, match="unknown --api"):
        make_client(ModelConfig(api="missing-test", model="m"))
    # a client named by import path is imported when made; a broken path says what to fix
    register_client("echo-path", ClientInfo("tests.agents.test_model_clients:PathEcho"))
    assert type(make_client(ModelConfig(api="echo-path", model="m"))).__name__ == "PathEcho"
    register_client("gone-test", ClientInfo("solforge_no_such_module:Client"))
    with pytest.raises(ModelError, match="model client 'gone-test': solforge_no_such_module:"
                       "Client could not be loaded: importing solforge_no_such_module failed"):
        make_client(ModelConfig(api="gone-test", model="m"))
