"""The agent's control flow, as a small exception family (mini-swe-agent's shape).

Two kinds:

- :class:`AgentExit` and its subclasses end the loop. Each carries the ``status`` the
  trajectory and the ledger record (``submitted``, ``limits_exceeded``, ...), and a
  message a person can act on.
- :class:`FormatError` and :class:`ToolError` do not: their message goes back to the model
  as the result of its turn, and the loop goes on.

:class:`ModelError` is what a client raises when the endpoint cannot be used (no key,
unreachable, still failing after its retries); the loop ends with status ``model_error``.
"""

from __future__ import annotations

from typing import Any


class AgentExit(Exception):
    """Ends the agent loop with ``status``."""

    status = "exit"

    def __init__(self, message: str = "", **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class Submitted(AgentExit):
    """The agent called ``submit``; ``data`` holds the verdict summary."""

    status = "submitted"


class LimitsExceeded(AgentExit):
    """A budget (steps, tokens, cost) is spent."""

    status = "limits_exceeded"


class RunStopping(AgentExit):
    """The run this agent works for is stopping (the planner's budget is spent)."""

    status = "stopped"


class TimeExceeded(LimitsExceeded):
    """The wall-clock budget is spent."""

    status = "time_exceeded"


class ContextExhausted(LimitsExceeded):
    """The conversation no longer fits the model's context, even with old output trimmed."""

    status = "context_exhausted"


class ModelError(AgentExit):
    """The model endpoint cannot be used; the message says what to set or check."""

    status = "model_error"


class ContextTooLong(ModelError):
    """The endpoint rejected a request as longer than its context window (the loop trims
    and retries before giving up with :class:`ContextExhausted`)."""

    status = "context_exhausted"


class FormatError(Exception):
    """The model's turn could not be acted on (no tool call, unknown tool, bad arguments);
    the message, sent back to the model, says what a valid turn looks like."""


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model."""
