"""The agent's trajectory: one JSONL file per worker and problem, schema ``solforge.trajectory/1``.

Lines, each a JSON object with a ``type``:

- ``header`` (first line): schema, worker, problem, model settings (never the key), the
  system prompt, the tools, the budgets.
- ``step``: the messages a step added (the task is step 0; then the assistant turn and its
  tool results), that step's usage, the running totals, elapsed seconds, and what the
  context trimming did.
- ``event``: something beside the conversation (a retry, a trim, a budget warning).
- ``resume``: the run was continued from here.
- ``exit``: how the loop ended (status, message, data), with the totals.

Appending a line per step keeps every saved step on disk when a process dies; a line
cut short by a crash is ignored on reading (and ended before anything is appended).
:func:`load` rebuilds what a resumed loop needs. New optional keys may appear within a
schema version; renaming or removing one bumps it.

Not covered: concurrent writers to one file (one worker owns one trajectory).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from solforge.agents.model import Message
from solforge.orchestrate.units import Usage

TRAJECTORY_SCHEMA = "solforge.trajectory/1"


class TrajectoryState(BaseModel):
    """What a trajectory file says so far."""

    header: dict[str, Any] = Field(default_factory=dict)
    messages: list[Message] = Field(default_factory=list)
    steps: int = 0
    usage: Usage = Field(default_factory=Usage)
    elapsed_s: float = 0.0
    exit: dict[str, Any] | None = None


class Trajectory:
    """Appends lines to ``path``; one instance per loop."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _append(self, obj: dict[str, Any]) -> None:
        obj.setdefault("ts", time.time())
        with self.path.open("a+b") as f:
            f.seek(0, 2)
            if f.tell():
                f.seek(-1, 2)
                if f.read(1) != b"\n":  # a line cut short by a crash: don't run into it
                    f.write(b"\n")
            f.write(json.dumps(obj, default=str).encode() + b"\n")
            f.flush()

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new file (an existing one is replaced)."""
        self.path.write_text("")
        self._append({"type": "header", "schema": TRAJECTORY_SCHEMA, **header})

    def resume(self, **data: Any) -> None:
        self._append({"type": "resume", **data})

    def step(self, step: int, messages: list[Message], usage: Usage, totals: Usage,
             elapsed_s: float, **extra: Any) -> None:
        self._append({"type": "step", "step": step,
                      "messages": [m.model_dump(mode="json", exclude_defaults=True)
                                   for m in messages],
                      "usage": usage.model_dump(), "totals": totals.model_dump(),
                      "elapsed_s": round(elapsed_s, 3), **extra})

    def event(self, kind: str, **data: Any) -> None:
        self._append({"type": "event", "kind": kind, **data})

    def exit(self, status: str, message: str, data: dict[str, Any], steps: int,
             totals: Usage, elapsed_s: float) -> None:
        self._append({"type": "exit", "status": status, "message": message, "data": data,
                      "steps": steps, "totals": totals.model_dump(),
                      "elapsed_s": round(elapsed_s, 3)})


def load(path: Path) -> TrajectoryState:
    """Read a trajectory; :class:`ValueError` if it is not one this version can read."""
    state = TrajectoryState()
    lines = Path(path).read_text().splitlines()
    for line in lines:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line a dying process did not finish
        kind = obj.get("type")
        if kind == "header":
            if obj.get("schema") != TRAJECTORY_SCHEMA:
                raise ValueError(f"{path}: schema {obj.get('schema')!r}, this solforge reads "
                                 f"{TRAJECTORY_SCHEMA}")
            state.header = obj
        elif kind == "step":
            state.messages += [Message.model_validate(m) for m in obj.get("messages", [])]
            state.steps = max(state.steps, int(obj.get("step", 0)))
            state.usage = Usage.model_validate(obj.get("totals") or {})
            state.elapsed_s = float(obj.get("elapsed_s", state.elapsed_s))
        elif kind == "exit":
            state.exit = obj
        elif kind == "resume":
            state.exit = None
    if not state.header:
        raise ValueError(f"{path}: no header line; not a solforge trajectory")
    state.messages = repair(state.messages)
    return state


def repair(messages: list[Message]) -> list[Message]:
    """Answer tool calls left without a result (a process killed mid-step), so the
    conversation is valid for every API again."""
    out: list[Message] = []
    pending: list[str] = []
    names: dict[str, str] = {}
    for m in messages:
        if m.role == "tool" and m.tool_call_id in pending:
            pending.remove(m.tool_call_id)
        elif pending:
            out += [Message(role="tool", tool_call_id=cid, name=names.get(cid),
                            content="error: interrupted before this call finished; run it "
                                    "again if you need it") for cid in pending]
            pending = []
        out.append(m)
        if m.role == "assistant":
            pending = [c.id for c in m.tool_calls]
            names.update({c.id: c.name for c in m.tool_calls})
    out += [Message(role="tool", tool_call_id=cid, name=names.get(cid),
                    content="error: interrupted before this call finished; run it again "
                            "if you need it") for cid in pending]
    return out
