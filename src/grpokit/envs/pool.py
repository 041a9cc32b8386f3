"""Stepping many environments at once, each call under a time limit, failures reported by name.

Each ``reset``/``step`` of a turn runs in its own daemon thread, so G x P environments that wait on
I/O (a server, a subprocess) overlap, and one that hangs is abandoned after ``timeout_s``
instead of stalling the batch (a daemon thread never blocks the interpreter's exit). An
environment that raises or times out either ends its episode as a failure (``on_error:
fail_episode``: truncated, no further reward, counted in ``env/errors`` / ``env/timeouts``) or
stops the run with one line naming the environment and the row (``on_error: raise``). A batch in
which at least ``environment.max_failed_fraction`` of the episodes failed stops the run too
(:func:`grpokit.envs.episodes.check_failures`), naming the most common of these reasons.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

log = logging.getLogger(__name__)


class EnvironmentFailure(RuntimeError):
    """An environment raised or hung and the run is configured to stop (``environment.on_error: raise``), or
    more episodes of a batch failed than ``environment.max_failed_fraction`` allows."""


@dataclass
class CallOutcome:
    """One call's value, or why there is none: ``error`` (an exception's one-line text) or ``timed_out``."""

    value: Any = None
    error: Optional[str] = None
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


def call_all(calls: list[Callable[[], Any]], timeout_s: float) -> list[CallOutcome]:
    """Run every ``calls[i]()`` concurrently; each gets ``timeout_s`` seconds (0 = no limit) from the start."""
    outcomes = [CallOutcome() for _ in calls]
    done = [threading.Event() for _ in calls]

    def run(i: int) -> None:
        try:
            outcomes[i].value = calls[i]()
        except Exception as exc:  # an environment's bug becomes an outcome, never the trainer's crash
            outcomes[i].error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        finally:
            done[i].set()

    if len(calls) == 1 and not timeout_s:
        run(0)
        return outcomes
    threads = [threading.Thread(target=run, args=(i,), daemon=True, name=f"grpokit-env-{i}") for i in range(len(calls))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s if timeout_s else None
    for i, event in enumerate(done):
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not event.wait(left):
            outcomes[i] = CallOutcome(timed_out=True)  # abandoned: the thread's late result is ignored
    return outcomes


def check_outcome(outcome: CallOutcome, env_name: str, what: str, row_index: int, on_error: str, timeout_s: float) -> Optional[str]:
    """None when ``outcome`` holds a value; else why not, row left out (``"environment 'x' reset() raised KeyError: ..."``).

    The failure is logged, or raised for ``on_error='raise'``; the returned reason is what
    :class:`~grpokit.envs.episodes.EpisodeBackend` counts when every episode of a batch failed.
    """
    if outcome.ok:
        return None
    why = f"did not return within {timeout_s:g} s (environment.step_timeout_s)" if outcome.timed_out else f"raised {outcome.error}"
    reason = f"environment '{env_name}' {what} {why}"
    message = f"environment '{env_name}' {what} for row {row_index} {why}"
    if on_error == "raise":
        raise EnvironmentFailure(message + "; set environment.on_error=fail_episode to end such episodes as failures instead")
    log.warning("%s: the episode ends as a failure", message)
    return reason
