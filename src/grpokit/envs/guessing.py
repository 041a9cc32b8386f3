"""A multi-turn guessing game with feedback: find a secret integer from "higher" / "lower" replies.

The ``guess_number`` task (``grpokit.data.tasks``) draws a range and a secret per row; the ``guess_number`` environment
answers each guess with "higher", "lower" or ends the episode on the secret. Reward: 1 on
finding the secret, less ``turn_penalty`` per extra guess (binary search is the optimal policy,
so the return rewards using the feedback, not luck). A turn without a number is answered with a
format reminder and costs a turn. Without data (an environment-only run, :mod:`grpokit.envs.own_episodes`)
the environment makes its own episodes: the range and the secret are drawn from the episode's seed
as the task draws a row, and the task's prompt is the first observation.
"""

from __future__ import annotations

import random
import re
from typing import Any, Optional

from grpokit.data.tasks import GUESS_TEMPLATE
from grpokit.envs.base import ENVIRONMENTS, StepResult
from grpokit.envs.own_episodes import is_placeholder

_NUMBER = re.compile(r"-?\d+")


@ENVIRONMENTS.register("guess_number")
class GuessNumber:
    """Find the row's secret (``answer``, within ``lo..hi``) by guesses answered "higher" / "lower".

    reward = 1 - turn_penalty * (guesses - 1) on the secret (at least 0), else 0; the episode is
    truncated after ``max_guesses``. ``info``: ``solved`` (0/1) and ``valid_guess`` (the fraction of
    turns that held a number).
    """

    def __init__(self, *, max_guesses: int = 6, turn_penalty: float = 0.1, min_width: int = 4, max_width: int = 16) -> None:
        if max_guesses < 1 or turn_penalty < 0:
            raise ValueError(f"guess_number: environment.options max_guesses={max_guesses} must be at least 1 and "
                             f"turn_penalty={turn_penalty} at least 0")
        if not 1 <= min_width <= max_width:
            raise ValueError(f"guess_number: environment.options need 1 <= min_width <= max_width, got {min_width}, {max_width}")
        self.max_guesses, self.turn_penalty = max_guesses, turn_penalty
        self.min_width, self.max_width = min_width, max_width  # the ranges of episodes it makes itself (no data)

    @staticmethod
    def config_problem(env_cfg: Any) -> Optional[str]:
        """Why ``environment`` options clash (one line), or None: guesses beyond the turn cap would never be played."""
        guesses = env_cfg.options.get("max_guesses", 6)
        if guesses > env_cfg.max_turns:
            return (f"environment.options.max_guesses={guesses} exceeds environment.max_turns={env_cfg.max_turns}, which ends "
                    f"every episode first, so the guesses above it change nothing: set max_guesses <= max_turns or raise max_turns")
        return None

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> str:
        self.guesses, self.valid = 0, 0
        if is_placeholder(row):  # no data: the episode is drawn from its seed, as the guess_number task draws a row
            rng = random.Random(seed)
            lo = rng.randint(1, 50)
            hi = lo + rng.randint(self.min_width, self.max_width) - 1
            self.secret = rng.randint(lo, hi)
            return GUESS_TEMPLATE.format(lo=lo, hi=hi)
        if row.get("answer") is None:
            raise ValueError("guess_number: the row has no 'answer' column (the secret): use data.task=guess_number, give your rows one, "
                             "or set data.task=null for episodes it makes itself")
        self.secret = int(row["answer"])
        return ""  # the row's prompt is the first observation

    def step(self, action: str) -> StepResult:
        self.guesses += 1
        found = _NUMBER.findall(action)
        if found:
            self.valid += 1
        info = {"solved": 0.0, "valid_guess": self.valid / self.guesses}
        if found and int(found[-1]) == self.secret:
            info["solved"] = 1.0
            return StepResult("", max(1.0 - self.turn_penalty * (self.guesses - 1), 0.0), terminated=True, info=info)
        if self.guesses >= self.max_guesses:
            return StepResult("", 0.0, truncated=True, info=info)
        if not found:
            return StepResult("Reply with just one number.", 0.0, info=info)
        return StepResult("Higher." if int(found[-1]) < self.secret else "Lower.", 0.0, info=info)
