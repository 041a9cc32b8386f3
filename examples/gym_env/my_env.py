"""Your own gymnasium environment, trained with GRPO: a hot/cold game on a number line.

The environment is a plain ``gymnasium.Env`` with text observations and text actions. grpokit
needs no registration module, no ``gymnasium.register`` and no ``PYTHONPATH``: the config names the
class by file and name, and the run builds it with ``environment.options``::

    environment:
      name: examples/gym_env/my_env.py:HotCold   # path relative to the folder you run grpokit in
      options: {size: 20, max_guesses: 5}

Run it from the repository root (the embedded SmolLM2-135M-Instruct, CPU, a few minutes)::

    grpokit train examples/gym_env/config.yaml
    grpokit train examples/gym_env/config.yaml --set train.steps=2   # a quick look

What happens:

- No dataset: the config sets ``data.task: null`` and no ``data.path``, so the environment makes its own
  episodes (``grpokit.envs.own_episodes``): each training group plays a fresh seed, held-out
  episode ``i`` plays seed ``environment.heldout_seed + i`` at every evaluation. ``reset`` returns
  the first observation (the rules and the range), which is the prompt the model sees.
- Each model turn is one ``step(action_text)``; the reply ("hot", "warm", "cold", and whether it
  got warmer) is appended as a user message, and only the model's own tokens are trained.
- Rewards: ``env_return`` (the episode's summed step rewards: 1 for finding the target, less 0.1
  per extra guess) and ``env_info`` reading ``info["is_success"]`` (gymnasium's convention), the
  held-out accuracy. ``samples.jsonl`` and the printed sample tables show each episode's whole
  conversation, every turn with its role.
- A broken environment (an import error in this file, a constructor option it refuses, a
  ``reset`` that raises) stops the run at load, before the model loads, in one line naming
  ``environment.name``.

From Python, pass the class itself: ``cfg.environment.name = HotCold``.
"""

from __future__ import annotations

import re

import gymnasium
from gymnasium import spaces

_NUMBER = re.compile(r"-?\d+")


class HotCold(gymnasium.Env):
    """Find a hidden integer in ``1..size``: each guess is answered hot (within 2), warm (within 5) or cold.

    Reward: ``1 - 0.1 * (guesses - 1)`` on the target (terminated), else 0; the episode is truncated
    after ``max_guesses``. ``info``: ``is_success`` (found it) and ``distance`` (of the last guess;
    ``size`` for a turn without a number).
    """

    metadata = {"render_modes": []}

    def __init__(self, size: int = 20, max_guesses: int = 5) -> None:
        if size < 2 or max_guesses < 1:
            raise ValueError(f"HotCold: size={size} must be at least 2 and max_guesses={max_guesses} at least 1")
        self.size, self.max_guesses = size, max_guesses
        self.observation_space = spaces.Text(400)
        self.action_space = spaces.Text(400)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)  # seeds self.np_random: the episode is a function of its seed
        self.target = int(self.np_random.integers(1, self.size + 1))
        self.guesses, self.last = 0, None
        rules = (f"I am hiding a whole number from 1 to {self.size}. Guess it: reply with just one number. "
                 "I will say hot (within 2), warm (within 5) or cold.")
        return rules, {}

    def step(self, action: str):
        self.guesses += 1
        found = _NUMBER.findall(action)
        guess = int(found[-1]) if found else None
        distance = abs(guess - self.target) if guess is not None else self.size
        info = {"is_success": distance == 0, "distance": distance}
        if distance == 0:
            return "Found it!", max(1.0 - 0.1 * (self.guesses - 1), 0.0), True, False, info
        if guess is None:
            reply = "Reply with just one number."
        else:
            heat = "Hot." if distance <= 2 else "Warm." if distance <= 5 else "Cold."
            trend = "" if self.last is None else " Warmer." if distance < self.last else " Colder." if distance > self.last else " Same."
            reply = heat + trend
        self.last = distance
        return reply, 0.0, False, self.guesses >= self.max_guesses, info
