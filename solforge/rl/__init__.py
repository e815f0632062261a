"""RL against solforge: a gymnasium environment, rewards, a reward server, trainer adapters.

- ``KernelEnv`` (``kernel_env.py``): one problem an episode, played with the LLM worker's
  tools or whole solutions; the verdict's reward when it ends.
- ``RewardConfig`` / ``reward_of`` (``reward.py``): CUDA Agent's staged reward and a
  continuous SOL one; hacks and policy findings get the lowest value.
- ``Task`` / ``problem_text`` (``task.py``): what a label names and what a policy reads.
- ``SlotPool`` / ``create_app`` (``jobs.py``, ``server.py``): ``solforge serve``.
- ``RewardClient``, ``trl_reward``, ``compute_score`` (verl), ``openrlhf_reward_func``
  (``client.py``): the trainers' side.
- ``dataset_rows`` (``dataset.py``): ``solforge rl dataset``.

Names resolve on first use, so importing the package does not import gymnasium, Starlette
or httpx (the ``rl`` extra) until a name that needs one is asked for.
"""

from __future__ import annotations

from solforge.registry import lazy_face

_FACE = {
    "KernelEnv": "solforge.rl.kernel_env",
    "EnvConfig": "solforge.rl.kernel_env",
    "RewardConfig": "solforge.rl.reward",
    "Reward": "solforge.rl.reward",
    "reward_of": "solforge.rl.reward",
    "Task": "solforge.rl.task",
    "problem_text": "solforge.rl.task",
    "kernel_languages": "solforge.rl.task",
    "extract_solution": "solforge.rl.extract",
    "visible_feedback": "solforge.rl.feedback",
    "SlotPool": "solforge.rl.jobs",
    "create_app": "solforge.rl.server",
    "ServerLimits": "solforge.rl.server",
    "RewardClient": "solforge.rl.client",
    "trl_reward": "solforge.rl.client",
    "compute_score": "solforge.rl.client",
    "openrlhf_reward_func": "solforge.rl.client",
    "dataset_rows": "solforge.rl.dataset",
}

__all__ = sorted(_FACE)


__getattr__, __dir__ = lazy_face('solforge.rl', _FACE, globals())
