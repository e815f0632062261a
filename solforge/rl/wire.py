"""The reward server's request bodies, validated before anything is queued.

One solution is ``{"problem": NAME, "languages": [...], "solution": SOURCE}``; instead of
``problem``/``languages`` a ``label`` (what a trainer carries: a problem name, or the JSON
of a :class:`~solforge.rl.task.Task`), and instead of ``solution`` a ``completion`` (a
model's raw text, from which :func:`~solforge.rl.extract.extract_solution` takes the
source). ``POST /evaluate`` and ``POST /reward`` take one such object or
``{"solutions": [...]}``; the OpenRLHF route takes ``{"query": [...], "prompts": [...],
"labels": [...]}`` (``query`` is the prompt followed by the response).

Not covered: streaming bodies (a body is read whole, up to the server's limit).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from solforge.rl.extract import extract_solution
from solforge.rl.task import Task, TaskError


class Submission(BaseModel):
    """One solution for one task."""

    model_config = ConfigDict(extra="forbid")

    problem: str | None = Field(None, min_length=1, max_length=200)
    languages: list[str] | None = Field(None, max_length=8)
    label: Any = None
    solution: str | None = None
    completion: str | None = None

    @model_validator(mode="after")
    def _one_of_each(self) -> Submission:
        if (self.problem is None) == (self.label is None):
            raise ValueError("give either problem (with optional languages) or label")
        if (self.solution is None) == (self.completion is None):
            raise ValueError("give either solution (the source) or completion (a model's "
                             "text with the source in a ```python block)")
        return self

    def task(self) -> Task:
        if self.label is not None:
            return Task.parse(self.label)
        try:
            return Task(problem=self.problem or "", languages=self.languages)
        except ValueError as e:
            raise TaskError(str(e).splitlines()[-1].strip()) from None

    def source(self) -> str | None:
        return self.solution if self.solution is not None else \
            extract_solution(self.completion or "")


class Batch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    solutions: list[Submission] = Field(min_length=1)


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's ``--remote_rm_url`` body."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(min_length=1)
    prompts: list[str] | None = None
    labels: list[Any] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> OpenRLHFRequest:
        if self.labels is None:
            raise ValueError("labels: the tasks (one per query) are required: run "
                         "OpenRLHF with --label_key set to the dataset's label column")
        for name in ("prompts", "labels"):
            v = getattr(self, name)
            if v is not None and len(v) != len(self.query):
                raise ValueError(f"{name} has {len(v)} entries for {len(self.query)} queries")
        return self

    def submissions(self) -> list[Submission]:
        out = []
        for i, q in enumerate(self.query):
            prompt = self.prompts[i] if self.prompts else ""
            response = q[len(prompt):] if prompt and q.startswith(prompt) else q
            assert self.labels is not None
            out.append(Submission(label=self.labels[i], completion=response))
        return out


def parse_batch(body: Any) -> list[Submission]:
    """The submissions of a ``/evaluate`` or ``/reward`` body (raises pydantic's
    ValidationError, or ValueError for a body of the wrong type)."""
    if isinstance(body, dict) and "solutions" in body:
        return Batch.model_validate(body).solutions
    if isinstance(body, dict):
        return [Submission.model_validate(body)]
    if isinstance(body, list):
        return Batch.model_validate({"solutions": body}).solutions
    raise ValueError("the body is a JSON object: one solution, or {\"solutions\": [...]}")
