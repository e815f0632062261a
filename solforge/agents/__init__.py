"""LLM workers: model clients, tools, the agent loop, the protocol, and the worker.

::

    model.py             the message format, ModelConfig, the ModelClient protocol
    clients.py           the registry of model APIs (built-ins and plug-ins)
    retries.py           backoff and error classification of model calls
    settings.py          model settings from flags, a config file, the environment
    openai_client.py     OpenAI-compatible chat completions (openai SDK)
    anthropic_client.py  Anthropic messages (anthropic SDK)
    pricing.py           list prices per model-name pattern
    workspace.py         the agent's directory and its file tools
    shell.py             run_command, contained like a candidate
    ncu.py               Nsight Compute figures for profile, where ncu works
    report.py            what evaluate / profile / submit say to the model
    tools.py             the tool table and the Toolbox that runs calls
    context.py           trimming old tool output to fit the context budget
    trajectory.py        the JSONL trajectory (solforge.trajectory/1), resume
    loop.py              the agent loop, budgets
    errors.py            the exception family that steers the loop
    visible.py           problem.py without held-out workloads
    prompts/             SKILL.md (the protocol) and the role prompts
    worker.py            one agent on one problem in a run: workspace, loop, ledger
    optimize.py          optimize_llm: workers over targets in one run

No result from an LLM has been measured by the project yet: these modules are tested
against scripted model servers on loopback, not against real models.
"""

from solforge.agents.clients import ClientInfo, make_client, register_client
from solforge.agents.errors import (
    AgentExit,
    ContextExhausted,
    FormatError,
    LimitsExceeded,
    ModelError,
    Submitted,
    TimeExceeded,
    ToolError,
)
from solforge.agents.loop import Agent, AgentConfig, AgentResult
from solforge.agents.model import (
    Message,
    ModelClient,
    ModelConfig,
    ModelReply,
    ToolCall,
    ToolSpec,
)
from solforge.agents.optimize import OptimizeResult, optimize_llm
from solforge.agents.settings import resolve_model_config
from solforge.agents.tools import Toolbox, ToolConfig
from solforge.agents.worker import LLMWorker, WorkerConfig, run_llm_worker
from solforge.orchestrate.units import Usage, WorkerResult

__all__ = [
    "Agent", "AgentConfig", "AgentExit", "AgentResult", "ClientInfo", "ContextExhausted",
    "FormatError", "LLMWorker", "LimitsExceeded", "Message", "ModelClient", "ModelConfig",
    "ModelError", "ModelReply", "OptimizeResult", "Submitted", "TimeExceeded", "ToolCall",
    "ToolConfig", "ToolError", "ToolSpec", "Toolbox", "Usage", "WorkerConfig",
    "WorkerResult", "make_client", "optimize_llm", "register_client",
    "resolve_model_config", "run_llm_worker",
]
