"""Clients of the reward server: a small HTTP client and the trainers' reward functions.

- :class:`RewardClient`: ``reward(items)``, ``evaluate(items)`` / ``task(id)``,
  ``health()``, over httpx, with the bearer token (``$SOLFORGE_SERVE_TOKEN`` by default).
- TRL: :func:`trl_reward` gives ``f(prompts, completions, **kwargs) -> list[float]`` for
  ``GRPOTrainer(reward_funcs=[f])``; the task comes from the dataset column ``label``
  (``kwargs["label"]``: TRL passes every extra column by name). Conversational
  completions (lists of messages) are read from their last message's content.
- verl: :func:`compute_score` ``(data_source, solution_str, ground_truth, extra_info=None)
  -> {"score": float, "valid", "passed", "hack"}`` (numbers: verl logs them), one call per sample, as verl's custom reward function
  (``custom_reward_function.path`` = this file's module, ``name=compute_score``); the URL
  and token come from ``$SOLFORGE_SERVE_URL`` and ``$SOLFORGE_SERVE_TOKEN``.
- OpenRLHF: :func:`openrlhf_reward_func` ``(queries, prompts, labels)`` for a
  ``--remote_rm_url reward_func.py`` file; or point ``--remote_rm_url`` at the server's
  ``/openrlhf`` route directly and no code is needed.

Not covered: retries beyond one reconnect (a trainer's step should fail loudly when its
reward server is gone), async clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from solforge import env

DEFAULT_URL = "http://127.0.0.1:8471"


class RewardServerError(RuntimeError):
    """The reward server refused a request or could not be reached."""


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))  # a conversation: the last message
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


class RewardClient:
    """A blocking client of ``solforge serve``."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 timeout_s: float = 3700.0) -> None:
        self.url = (url or env.serve_url() or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else env.serve_token()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers,
                                 timeout=httpx.Timeout(timeout_s, connect=10.0))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise RewardServerError(f"{method} {self.url}{path}: {e}; is `solforge serve` "
                                    "running there?") from None
        if r.status_code >= 400:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            raise RewardServerError(f"{method} {path}: HTTP {r.status_code}: {msg}")
        return r.json()

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def evaluate(self, items: Sequence[dict[str, Any]]) -> list[str]:
        """Queue solutions; their task ids."""
        return self._call("POST", "/evaluate", json={"solutions": list(items)})["task_ids"]

    def task(self, task_id: str) -> dict[str, Any]:
        return self._call("GET", f"/tasks/{task_id}")

    def reward(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Score solutions and wait: one result per item, in order."""
        return self._call("POST", "/reward", json={"solutions": list(items)})["results"]

    def rewards(self, labels: Sequence[Any], completions: Sequence[Any]) -> list[float]:
        """One reward per completion, each for the task its label names."""
        if len(labels) != len(completions):
            raise ValueError(f"{len(labels)} labels for {len(completions)} completions")
        items = [{"label": lab, "completion": _text(c)} for lab, c in zip(labels, completions)]
        return [float(r["reward"]) for r in self.reward(items)]


def trl_reward(url: str | None = None, token: str | None = None, label_key: str = "label"):
    """A TRL ``GRPOTrainer`` reward function scoring completions on the server."""
    client = RewardClient(url, token)

    def solforge_reward(prompts: list[Any], completions: list[Any], **kwargs: Any
                        ) -> list[float]:
        labels = kwargs.get(label_key)
        if labels is None:
            raise KeyError(f"the dataset has no {label_key!r} column: write it with "
                           "`solforge rl dataset` (each row's label names its task)")
        return client.rewards(list(labels), list(completions))

    solforge_reward.__name__ = "solforge_reward"
    return solforge_reward


_VERL_CLIENTS: dict[tuple[str | None, str | None], RewardClient] = {}


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """verl's custom reward function: the server's reward of one response."""
    where = (env.serve_url(), env.serve_token())  # one pooled client per server
    client = _VERL_CLIENTS.get(where)
    if client is None:
        client = _VERL_CLIENTS[where] = RewardClient()
    result = client.reward([{"label": ground_truth, "completion": solution_str}])[0]
    r = result["result"]
    # numbers only: verl averages every key it gets into its metrics
    return {"score": float(result["reward"]), "valid": float(r["valid"]),
            "passed": float(r["status"] == "PASSED"), "hack": float(r["stage"] == "hack")}


def openrlhf_reward_func(queries: list[str], prompts: list[str], labels: list[Any],
                         **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's ``reward_func`` (a ``--remote_rm_url`` Python file): the server's
    rewards of the responses (``query`` minus its prompt), as tensors."""
    import torch

    client = RewardClient()
    try:
        out = client._call("POST", "/openrlhf", json={"query": list(queries),
                                                     "prompts": list(prompts),
                                                     "labels": list(labels)})
    finally:
        client.close()
    rewards = torch.tensor(out["rewards"], dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {
        k: torch.tensor(v) for k, v in out.get("extra_logs", {}).items()}}
