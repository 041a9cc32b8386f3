"""A multi-turn guessing game with feedback: find a secret integer from "higher" / "lower" replies.

The ``guess_number`` task (``grpokit.data.tasks``) draws a range and a secret per row; the ``guess_number`` environment
answers each guess with "higher", "lower" or ends the episode on the secret. Reward: 1 on
finding the secret, less ``turn_penalty`` per extra guess (binary search is the optimal policy,
so the return rewards using the feedback, not luck). A turn without a number is answered with a
format reminder and costs a turn.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult

_NUMBER = re.compile(r"-?\d+")


@ENVIRONMENTS.register("guess_number")
class GuessNumber:
    """Find the row's secret (``answer``, within ``lo..hi``) by guesses answered "higher" / "lower".

    reward = 1 - turn_penalty * (guesses - 1) on the secret (at least 0), else 0; the episode is
    truncated after ``max_guesses``. ``info``: ``solved`` (0/1) and ``valid_guess`` (the fraction of
    turns that held a number).
    """

    def __init__(self, *, max_guesses: int = 6, turn_penalty: float = 0.1) -> None:
        if max_guesses < 1 or turn_penalty < 0:
            raise ValueError(f"guess_number: environment.options max_guesses={max_guesses} must be at least 1 and "
                             f"turn_penalty={turn_penalty} at least 0")
        self.max_guesses, self.turn_penalty = max_guesses, turn_penalty

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> str:
        if row.get("answer") is None:
            raise ValueError("guess_number: the row has no 'answer' column (the secret): use data.task=guess_number or give your rows one")
        self.secret, self.guesses, self.valid = int(row["answer"]), 0, 0
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
