"""A scripted environment for the episode tests (loaded by path, as a user's file.py:Class)."""

import time

from grpokit.envs.base import StepResult


class Scripted:
    """Answers turn t with "obs<t>"; ends (terminated, reward = turns) after ``turns`` turns; may raise or hang.

    ``reward_by_length``: a turn's reward is the length of its action text mod 3 instead of 1;
    ``needs``: a row column ``reset`` reads (a row without it raises KeyError naming it);
    ``extra_info``: more info entries on every step (any JSON values).
    """

    def __init__(self, turns=3, raise_at=0, hang_at=0, reward_by_length=False, needs=None, extra_info=None):
        self.turns, self.raise_at, self.hang_at, self.by_length = turns, raise_at, hang_at, reward_by_length
        self.needs, self.extra_info = needs, dict(extra_info or {})

    def reset(self, row, seed=None):
        if self.needs and self.needs not in row:
            raise KeyError(f"the row has no '{self.needs}' column")
        self.t, self.seed = 0, seed
        return ""

    def step(self, action):
        self.t += 1
        if self.t == self.raise_at:
            raise KeyError("broken env")
        if self.t == self.hang_at:
            time.sleep(5)
        reward = float(len(action) % 3) if self.by_length else 1.0
        return StepResult(f"obs{self.t}", reward, terminated=self.t >= self.turns, info={"t": self.t, "action_len": len(action), "seed": self.seed, **self.extra_info})
