"""The prompts of a corpus as trainer rows: ``solforge rl dataset``.

One JSON object a line per problem (and language set), in the conventions the trainers
read without a conversion step:

- ``prompt``: the chat messages (``[{"role": "user", "content": TEXT}]``), which TRL and
  verl take as they are (OpenRLHF: ``--input_key prompt --apply_chat_template``);
- ``data_source``: ``"solforge"`` (verl routes its reward by it);
- ``reward_model``: ``{"style": "rule", "ground_truth": LABEL}`` (verl), with ``LABEL``
  the task's JSON string (:meth:`~solforge.rl.task.Task.label`), also as ``label`` (TRL's
  reward function and OpenRLHF's ``--label_key label`` read that column);
- ``extra_info``: the problem's name, category, index and languages.

``TEXT`` is :func:`~solforge.rl.task.problem_text` in single-turn mode (answer in one
```python block). verl reads parquet: ``pandas.read_json(PATH, lines=True).to_parquet(...)``
converts the file (docs/rl/verl.md).

Not covered: train/test splits (split the lines), multi-turn prompts (use ``KernelEnv``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from solforge.problems.spec import Problem
from solforge.rl.task import Task, WorkloadFigures, problem_text

DATA_SOURCE = "solforge"


def dataset_rows(problems: list[Problem], device: str, languages: list[str] | None = None,
                 policy: str = "strict",
                 figures: dict[str, list[WorkloadFigures]] | None = None
                 ) -> Iterator[dict[str, Any]]:
    """One trainer row per problem (see the module docstring)."""
    for i, problem in enumerate(problems):
        task = Task(problem=problem.name, languages=languages)
        text = problem_text(problem, device, task, policy,
                            (figures or {}).get(problem.name), mode="single")
        label = task.label()
        yield {"prompt": [{"role": "user", "content": text}], "data_source": DATA_SOURCE,
               "ability": "kernel", "reward_model": {"style": "rule", "ground_truth": label},
               "label": label, "extra_info": {"problem": problem.name, "index": i,
                                              "category": problem.category,
                                              "languages": task.accepted(),
                                              "device": device}}
