"""The agent loop: ReAct with native tool calls, budgets, and a trajectory after every step.

Each step: check the budgets (steps, tokens, cost, wall time); fit the conversation into
the context budget (``context.py``); ask the model for its turn; run each tool call it
made, in order, and append the results. A turn without a tool call gets a reminder
instead. Tool failures come back to the model as text; only :class:`AgentExit`
exceptions (``errors.py``) end the loop, and the trajectory is appended in a ``finally``
after every step whatever happened, so a run can be read and resumed.

Not covered: several agents sharing one conversation, asking the model to summarise
history (old tool output is trimmed instead), streaming.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from solforge.agents.context import estimate_tokens, fit_context
from solforge.agents.errors import (
    AgentExit,
    ContextExhausted,
    ContextTooLong,
    LimitsExceeded,
    RunStopping,
    Submitted,
    TimeExceeded,
)
from solforge.agents.model import Message, ModelClient, ModelReply
from solforge.agents.tools import Toolbox
from solforge.agents.trajectory import Trajectory, TrajectoryState
from solforge.orchestrate.units import Usage


class AgentConfig(BaseModel):
    """Budgets of one agent on one problem; 0 turns a limit off."""

    step_limit: int = Field(60, ge=0, description="model calls, at most")
    token_limit: int = Field(0, ge=0, description="input + output tokens over all calls")
    cost_limit_usd: float = Field(10.0, ge=0, description="dollars (needs a known price)")
    time_limit_s: float = Field(3600.0, ge=0, description="wall-clock seconds, tools "
                                "included; checked before each model call, so one step's "
                                "tools may run past it")
    context_tokens: int = Field(100_000, ge=1000, description="budget of one request's prompt")
    keep_recent_outputs: int = Field(3, ge=1, description="newest tool results the first "
                                     "trimming pass spares (the second spares the last)")
    max_idle_turns: int = Field(3, ge=1, description="turns in a row without a tool call")


class AgentResult(BaseModel):
    """How the loop ended."""

    status: str
    message: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    elapsed_s: float = 0.0


NO_TOOL_CALL = ("Your reply had no tool call. Act through the tools (read_file, write_file, "
                "edit_file, evaluate, profile, ...). When you are done, call "
                "submit(path, summary).")


class Agent:
    """One model, one toolbox, one trajectory."""

    def __init__(self, client: ModelClient, toolbox: Toolbox, config: AgentConfig,
                 trajectory: Trajectory, on_usage: Callable[[Usage], None] | None = None,
                 on_event: Callable[..., None] | None = None,
                 stop: Callable[[], str] | None = None) -> None:
        self.client = client
        # the run's stop reason once it has one (the planner's budget spent), else ""
        self.stop = stop or (lambda: "")
        self.toolbox = toolbox
        self.config = config
        self.trajectory = trajectory
        self.on_usage = on_usage or (lambda usage: None)
        self.on_event = on_event or (lambda kind, **data: None)
        self.system = ""
        self.messages: list[Message] = []
        self.steps = 0
        self.usage = Usage()
        self.idle = 0
        self.context_budget = config.context_tokens
        self._t0 = time.monotonic()
        self._saved = 0
        self._step_usage = Usage()
        self._trimmed = 0

    # -- running ------------------------------------------------------------------------------
    def run(self, system: str, task: str, header: dict[str, Any] | None = None,
            resume: TrajectoryState | None = None) -> AgentResult:
        """Run until an exit; ``resume`` continues a saved trajectory instead of starting."""
        self.system = system
        if resume is not None:
            self.messages = list(resume.messages)
            self.steps, self.usage = resume.steps, resume.usage
            self._t0 = time.monotonic() - resume.elapsed_s
            self._saved = len(self.messages)
            self.trajectory.resume(steps=self.steps, elapsed_s=round(resume.elapsed_s, 3))
        else:
            self.trajectory.start({**(header or {}), "system": system,
                                   "tools": [t.name for t in self.toolbox.specs()],
                                   "agent": self.config.model_dump()})
            self.messages = [Message(role="user", content=task)]
            self._save()
        if self.config.cost_limit_usd and self.client.config.prices() is None:
            note = (f"no price known for model {self.client.config.model!r}: the cost limit "
                    "is not enforced (give price_in / price_out)")
            self.trajectory.event("cost_unpriced", message=note)
            self.on_event("cost_unpriced", message=note)
        status, message, data = "error", "", {}
        try:
            while True:
                try:
                    self.step()
                finally:
                    self._save()
        except AgentExit as e:
            status, message, data = e.status, e.message, e.data
        except Exception as e:  # a bug of ours: end this problem with a record, not a crash
            status, message = "error", f"{type(e).__name__}: {e}"
            data = {"traceback": traceback.format_exc()[-4000:]}
        result = AgentResult(status=status, message=message, data=data, steps=self.steps,
                             usage=self.usage, elapsed_s=self.elapsed())
        self.trajectory.exit(status, message, data, self.steps, self.usage, result.elapsed_s)
        return result

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _save(self) -> None:
        new = self.messages[self._saved:]
        if not new and self._step_usage.calls == 0:
            return
        self.trajectory.step(self.steps, new, self._step_usage, self.usage, self.elapsed(),
                             trimmed=self._trimmed, context_budget=self.context_budget)
        self._saved = len(self.messages)
        self._step_usage = Usage()

    # -- one step -------------------------------------------------------------------------------
    def check_budgets(self) -> None:
        c, u = self.config, self.usage
        stopping = self.stop()
        if stopping:
            raise RunStopping(f"the run is stopping ({stopping})")
        if c.step_limit and self.steps >= c.step_limit:
            raise LimitsExceeded(f"step limit reached: {self.steps} model calls", limit="steps")
        if c.token_limit and u.tokens >= c.token_limit:
            raise LimitsExceeded(f"token limit reached: {u.tokens} of {c.token_limit}",
                                 limit="tokens")
        if c.cost_limit_usd and u.cost_usd is not None and u.cost_usd >= c.cost_limit_usd:
            raise LimitsExceeded(f"cost limit reached: ${u.cost_usd:.4f} of "
                                 f"${c.cost_limit_usd:g}", limit="cost")
        if c.time_limit_s and self.elapsed() >= c.time_limit_s:
            raise TimeExceeded(f"time limit reached: {self.elapsed():.0f} s of "
                               f"{c.time_limit_s:g} s", limit="time")

    def step(self) -> None:
        self.check_budgets()
        reply = self.query()
        self.steps += 1
        self.usage = self.usage + reply.usage
        self._step_usage = reply.usage
        self.on_usage(reply.usage)
        msg = reply.message
        self.messages.append(msg)
        if not msg.tool_calls:
            self.idle += 1
            if self.idle >= self.config.max_idle_turns:
                raise LimitsExceeded(f"{self.idle} turns in a row without a tool call",
                                     limit="idle")
            cut = " Your reply was cut at the output limit." if reply.stop_reason == "length" \
                else ""
            self.messages.append(Message(role="user", content=NO_TOOL_CALL + cut))
            return
        self.idle = 0
        calls = list(msg.tool_calls)
        for i, call in enumerate(calls):
            try:
                out = self.toolbox.call(call, thought=msg.content)
            except Submitted as e:
                self.messages.append(Message(role="tool", tool_call_id=call.id,
                                             name=call.name, content=e.message))
                self.messages += [Message(role="tool", tool_call_id=c.id, name=c.name,
                                          content="not run: the solution was submitted")
                                  for c in calls[i + 1:]]
                raise
            if reply.stop_reason == "length" and out.startswith("error:"):
                out += ("\n(your reply was cut at the output limit: write smaller files or "
                        "use edit_file)")
            self.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name,
                                         content=out))

    def query(self) -> ModelReply:
        """The model's turn on the trimmed view; shrinks the view when the endpoint says
        the request is too long, and gives up when nothing is left to trim."""
        for _ in range(4):
            fitted = fit_context(self.system, self.messages, self.context_budget,
                                 self.config.keep_recent_outputs)
            if fitted is None:
                raise ContextExhausted(
                    f"the conversation does not fit {self.context_budget} tokens even with "
                    "old tool output trimmed", limit="context")
            view, self._trimmed = fitted
            if self._trimmed:
                self.on_event("context_trimmed", trimmed=self._trimmed,
                              budget=self.context_budget)
            try:
                return self.client.complete(self.system, view, self.toolbox.specs(),
                                            on_retry=self._on_retry)
            except ContextTooLong as e:
                estimate = estimate_tokens(self.system, view)
                self.context_budget = max(1000, int(min(self.context_budget, estimate) * 0.7))
                self.trajectory.event("context_too_long", message=e.message,
                                      new_budget=self.context_budget)
                self.on_event("context_too_long", new_budget=self.context_budget)
        raise ContextExhausted("the endpoint kept rejecting the request as too long",
                               limit="context")

    def _on_retry(self, attempt: int, wait_s: float, reason: str) -> None:
        self.trajectory.event("retry", attempt=attempt, wait_s=round(wait_s, 3), reason=reason)
        self.on_event("model_retry", attempt=attempt, wait_s=round(wait_s, 3), reason=reason)
