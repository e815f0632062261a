"""LLM composition: a model is asked to fuse given catalogue ops into one problem.

The request names the ops and the format; the reply is a ``submit_problem`` tool call
with the module's ``code``, or a fenced Python block in the text. The module must define
``Model``, ``get_inputs`` and ``get_init_inputs`` (keyword size parameters with defaults)
and a literal ``SHAPES`` dict giving those parameters for the four workloads
(``cpu_small``, ``cpu_odd``, ``gpu_medium``, ``gpu_large``); ``SHAPES`` becomes the problem's
workloads and is cut from the code. What comes back then goes through the same dedupe and
filters as a catalogue draw.

The client is any registered one (``solforge.agents.clients``: OpenAI-compatible,
Anthropic, plug-ins), configured as ``solforge optimize --agent llm`` is.

Not covered: reproducibility (a model's reply is not a function of the seed; the ops it
is asked for are), several turns (a reply that fails is dropped, not repaired), and code
the model writes that hangs or crashes the interpreter: the filters run it in this
process, so use a model you trust or run synth in a sandbox.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass

from solforge.agents.model import Message, ModelClient, ToolSpec
from solforge.synth.catalogue import catalogue
from solforge.synth.compose import TIER_FLAGS, TIERS, with_meta

SYSTEM = (
    "You write PyTorch reference problems in KernelBench format for a GPU kernel benchmark. "
    "A problem is one Python module: `class Model(nn.Module)` whose forward fuses the given "
    "operators into one computation; `get_inputs(...)` returning the forward's input tensors "
    "(torch.randn, float32); `get_init_inputs(...)` returning Model's constructor arguments; "
    "both take only integer size parameters as keywords with defaults. Add a literal dict "
    "SHAPES mapping each of cpu_small, cpu_odd, gpu_medium, gpu_large to those parameters' "
    "values: cpu_* run on a CPU in milliseconds (cpu_odd with odd sizes), gpu_medium and "
    "gpu_large take 0.1 to 50 ms on an H100. No randomness in forward, no dropout, no "
    "printing. Submit the module with the submit_problem tool.")

SUBMIT = ToolSpec(name="submit_problem", description="Submit the problem module's source.",
                  parameters={"type": "object", "properties": {"code": {
                      "type": "string", "description": "the whole Python module"}},
                      "required": ["code"]})


class ReplyError(ValueError):
    """A reply that does not hold a usable problem; the message says what is missing."""


@dataclass(frozen=True)
class LLMDraft:
    """A problem written by the model: its name, ops, module code and SOLFORGE dict."""

    name: str
    ops: tuple[str, ...]
    code: str
    meta: dict

    def problem_text(self) -> str:
        return with_meta(self.code, self.meta)


def pick_ops(seed: int, index: int, ops: list[str] | None, max_ops: int) -> tuple[str, ...]:
    """The ops request ``index`` of ``seed`` names: 2 to ``max_ops`` distinct ones."""
    rng = random.Random(f"solforge-synth-llm:{seed}:{index}")
    names = [op.name for op in catalogue(ops)]
    k = min(len(names), rng.randint(min(2, max_ops), max_ops))
    return tuple(rng.sample(names, k))


def prompt(ops: tuple[str, ...]) -> str:
    return (f"Write one problem whose Model fuses these operators, in an order that makes "
            f"sense: {', '.join(ops)}. Shapes must fit every operator; keep the output a "
            "single floating tensor that depends on every input.")


def _code_of(reply_text: str, calls: list) -> str:
    for call in calls:
        if call.name == SUBMIT.name:
            args = call.parsed()
            if isinstance(args.get("code"), str):
                return args["code"]
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", reply_text, re.DOTALL)
    if blocks:
        return max(blocks, key=len)
    raise ReplyError("the reply has neither a submit_problem call nor a ```python block")


def parse(source: str) -> tuple[str, dict[str, dict[str, int]]]:
    """The module without ``SHAPES``, and ``SHAPES`` checked (four tiers of int sizes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ReplyError(f"the code does not parse: {e}") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in defined]
    if missing:
        raise ReplyError(f"the code does not define {', '.join(missing)}")
    node = next((n for n in tree.body if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "SHAPES" for t in n.targets)), None)
    if node is None:
        raise ReplyError("the code has no SHAPES dict")
    try:
        shapes = ast.literal_eval(node.value)
    except ValueError:
        raise ReplyError("SHAPES must be a literal dict of dicts of integers") from None
    if not (isinstance(shapes, dict) and set(shapes) == set(TIERS) and all(
            isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, int)
                                        for k, x in v.items()) for v in shapes.values())):
        raise ReplyError(f"SHAPES must map exactly {', '.join(TIERS)} to dicts of integer "
                         "sizes")
    lines = source.splitlines()
    kept = lines[:node.lineno - 1] + lines[node.end_lineno:]
    return "\n".join(kept).rstrip() + "\n", {t: dict(shapes[t]) for t in TIERS}


def ask(client: ModelClient, seed: int, index: int, ops: tuple[str, ...]) -> LLMDraft:
    """One request to the model; :class:`ReplyError` when the reply is not a problem
    (:class:`~solforge.agents.errors.ModelError` when the endpoint fails)."""
    reply = client.complete(SYSTEM, [Message(role="user", content=prompt(ops))], [SUBMIT])
    code, shapes = parse(_code_of(reply.message.content, reply.message.tool_calls))
    slug = re.sub(r"[^0-9a-z]+", "_", "_".join(ops))[:56].strip("_")
    name = f"synth_s{seed}_{index:05d}_llm_{slug}"
    meta = {"name": name, "category": "synth", "models": ["synthetic"],
            "family": "synthetic", "precision": "fp32",
            "description": f"LLM-written fusion of: {', '.join(ops)}",
            "shapes_from": f"synth seed {seed} (LLM {client.config.model})",
            "distributions": ["normal", "outliers"],
            "workloads": [{"name": t, "params": shapes[t], **TIER_FLAGS[t]} for t in TIERS],
            "origin": {"format": "solforge-synth", "seed": str(seed), "draw": str(index),
                       "ops": ", ".join(ops), "llm": client.config.model}}
    return LLMDraft(name, ops, code, meta)
