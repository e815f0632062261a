"""Fitting the conversation into the model's context: old tool output goes first.

:func:`fit_context` returns the view of the conversation that is sent; the trajectory
keeps every message whole. Old tool results are replaced by a one-line stub (oldest
first, the most recent ``keep_recent`` spared), then old ``write_file`` / ``edit_file``
arguments (the file text the model already wrote). The task (the first message) and
every assistant text stay: they carry the plan and the stated reasoning.

Token counts are estimated at four characters a token plus a little per message, a
deliberate over-estimate for code; the limit is a budget, not the model's exact window,
and an endpoint that still rejects a request as too long makes the loop shrink it
(``loop.py``).

Not covered: summarising old turns with the model.
"""

from __future__ import annotations

import json

from solforge.agents.model import Message, ToolCall

CHARS_PER_TOKEN = 4
PER_MESSAGE = 8


def estimate_tokens(system: str, messages: list[Message]) -> int:
    chars = len(system)
    for m in messages:
        chars += len(m.content) + sum(len(c.arguments) + len(c.name) for c in m.tool_calls)
    return chars // CHARS_PER_TOKEN + PER_MESSAGE * (len(messages) + 1)


def _stub_output(m: Message) -> Message:
    return m.model_copy(update={"content": f"[{m.name or 'tool'} output trimmed to save "
                                           f"context ({len(m.content)} characters); run it "
                                           "again if you need it]"})


def _stub_arguments(m: Message) -> Message:
    calls = []
    for c in m.tool_calls:
        if c.name in ("write_file", "edit_file") and len(c.arguments) > 200:
            try:
                args = json.loads(c.arguments)
            except json.JSONDecodeError:
                args = {}
            keep = {k: v for k, v in args.items() if k == "path"}
            keep["trimmed"] = f"{len(c.arguments)} characters of file text, already applied"
            c = ToolCall(id=c.id, name=c.name, arguments=json.dumps(keep))
        calls.append(c)
    return m.model_copy(update={"tool_calls": calls})


def fit_context(system: str, messages: list[Message], budget_tokens: int,
                keep_recent: int = 3) -> tuple[list[Message], int] | None:
    """(the messages to send, how many were trimmed), or None when even trimming all but
    the task and the last tool result does not bring the estimate under budget."""
    if estimate_tokens(system, messages) <= budget_tokens:
        return messages, 0
    view = list(messages)
    tool_idx = [i for i, m in enumerate(view) if m.role == "tool"]
    done: set[int] = set()
    # pass 1 spares the most recent keep_recent results; pass 2 all but the very last
    for spare in (keep_recent, 1):
        for i in tool_idx[: max(len(tool_idx) - spare, 0)]:
            if i not in done:
                view[i] = _stub_output(view[i])
                done.add(i)
                if estimate_tokens(system, view) <= budget_tokens:
                    return view, len(done)
        last_assistant = max((i for i, m in enumerate(view) if m.role == "assistant"),
                             default=-1)
        for i, m in enumerate(view):
            if m.role == "assistant" and i < last_assistant and i not in done and any(
                    c.name in ("write_file", "edit_file") for c in m.tool_calls):
                view[i] = _stub_arguments(m)
                done.add(i)
                if estimate_tokens(system, view) <= budget_tokens:
                    return view, len(done)
    return None
