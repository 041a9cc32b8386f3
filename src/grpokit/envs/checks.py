"""Load-time checks of a multi-turn run: one line naming the field, before anything loads.

:func:`environment_problem` reads the config alone; :func:`rows_problem` builds each environment
the rows name once and resets it on the first few training and held-out rows, so an environment
that cannot be imported or built, and rows it cannot start an episode from (a column it reads is
missing, an option it refuses), stop the run before the model loads, not as a run whose every
episode failed (or a traceback at the first step).
"""

from __future__ import annotations

from typing import Any, Optional


def environment_problem(cfg: Any) -> Optional[str]:
    """Why ``cfg`` cannot run environment episodes as configured (one line), or None."""
    e = cfg.environment
    if not e.name:
        episodic = [r.name for r in cfg.rewards if r.name in ("env_return", "env_info")]
        if episodic:
            return f"reward '{episodic[0]}' reads an environment episode, but environment.name is null: set environment.name or drop the reward"
        from dataclasses import fields

        default = type(e)()
        unused = [f.name for f in fields(e) if getattr(e, f.name) != getattr(default, f.name)]
        if unused:
            return (f"environment.{unused[0]} is set but environment.name is null (single-turn completions), so it changes "
                    f"nothing: set environment.name or drop environment.{unused[0]}")
        return None
    from grpokit.envs.base import ENVIRONMENTS, environment_factory

    try:
        environment_factory(e.name)
    except ValueError as exc:
        return f"environment.name: {exc}"
    if isinstance(e.name, str) and e.name in ENVIRONMENTS:
        try:
            ENVIRONMENTS.check_options(e.name, e.options, "environment.options")
        except ValueError as exc:
            return str(exc)
        own_check = getattr(ENVIRONMENTS.get(e.name), "config_problem", None)  # options that clash with the episode caps
        if callable(own_check) and own_check(e):
            return own_check(e)
    if e.name == "tools":  # it runs model-written code: no sandbox here, or a tool the sandbox cannot import
        from grpokit.envs.tools import tools_problem

        problem = tools_problem(e.options)
        if problem:
            return problem
    if cfg.rollout.backend != "hf":
        return (f"environment '{e.name}' needs token-level sampling of every turn, which rollout.backend="
                f"{cfg.rollout.backend} does not offer yet: set rollout.backend=hf")
    if cfg.distributed.rollout_workers and cfg.distributed.verify_rollouts:
        return ("distributed.verify_rollouts (TOPLOC) commits one generation's hidden states, and an episode is several: "
                "set distributed.verify_rollouts=false for environment runs")
    single_turn = {
        "verification.enabled": cfg.verification.enabled, "variational.enabled": cfg.variational.enabled,
        "algorithm.plan_delimiter": bool(cfg.algorithm.plan_delimiter),
        "data.offline_filter_samples": bool(cfg.data.offline_filter_samples),
    }
    clashing = [k for k, on in single_turn.items() if on]
    if clashing:
        return f"{clashing[0]} rewrites single-turn completions and cannot take environment episodes: turn it off or set environment.name=null"
    if e.credit == "reward_to_go":
        if cfg.algorithm.advantage not in ("grpo", "dr_grpo") or cfg.algorithm.scale == "batch":
            return (f"environment.credit=reward_to_go computes GRPO's group-standardised advantages per turn, not algorithm.advantage="
                    f"{cfg.algorithm.advantage} with scale {cfg.algorithm.scale}: use advantage grpo or dr_grpo (scale group or none)")
        if not any(r.name == "env_return" and r.weight for r in cfg.rewards):
            return ("environment.credit=reward_to_go splits the env_return reward over turns, and no reward is env_return "
                    "with a weight: add {name: env_return} to rewards or use credit=episode")
        if cfg.reward_combiner.name != "fixed":
            return (f"environment.credit=reward_to_go splits a weighted sum of rewards over turns, not reward_combiner.name="
                    f"{cfg.reward_combiner.name}: use the fixed combiner or credit=episode")
    if e.credit == "episode" and e.turn_discount != 1.0:
        return (f"environment.turn_discount={e.turn_discount:g} discounts reward_to_go credit, and environment.credit=episode "
                "gives every turn the episode's reward undiscounted: set environment.credit=reward_to_go or drop turn_discount")
    if e.max_episode_tokens < cfg.rollout.max_new_tokens:
        return (f"environment.max_episode_tokens ({e.max_episode_tokens}) is below one turn's cap rollout.max_new_tokens "
                f"({cfg.rollout.max_new_tokens}): raise it")
    return None


def rows_problem(cfg: Any, splits: dict[str, list[dict]], sample: int = 3) -> Optional[str]:
    """Why an environment cannot start episodes from the first ``sample`` rows of each split (one line), or None.

    ``splits``: ``{"train": rows, "heldout": rows}``. Each environment is built once with
    ``environment.options`` and reset on each sampled row with that split's first seed, under
    ``environment.step_timeout_s``; its ``close()`` is called after. So an environment that
    cannot be imported, built or reset stops the run here, before the model loads, in one line
    naming ``environment.name``. Placeholder rows (:mod:`grpokit.envs.own_episodes`) need an
    environment whose ``reset`` returns the first observation, and no reward reading an answer.
    """
    e = cfg.environment
    from grpokit.envs.own_episodes import is_placeholder

    placeholders = any(is_placeholder(row) for rows in splits.values() for row in rows[:1])
    if not e.name:
        if placeholders:
            return ("data: set data.task (a built-in task) or data.path (a dataset file), or environment.name to an "
                    "environment that makes its own episodes (see grpokit.envs.own_episodes)")
        return None
    if placeholders:
        problem = _answer_reward(cfg)
        if problem:
            return problem
    from grpokit.envs.base import environment_factory, environment_label, reset_result

    own = {row.get("environment") for rows in splits.values() for row in rows}
    if own and None not in own and "" not in own and e.name not in own:  # every row plays its own: environment.name plays none
        return (f"environment.name '{environment_label(e.name)}' plays no episode: every row names its own environment "
                f"('{sorted(map(str, own))[0]}', the rows' environment column, e.g. written by data.task): set data.task=null for "
                "episodes the environment makes itself, or give rows without that column (data.path)")
    from grpokit.envs.pool import call_all

    built: dict[str, Any] = {}
    try:
        for split, rows in splits.items():
            for i, row in enumerate(rows[:sample]):
                name = row.get("environment") or e.name
                label = _field(row.get("environment"), e.name)
                key = environment_label(name)
                if key not in built:
                    try:
                        factory = environment_factory(name)
                    except ValueError as exc:
                        return f"{label}: {exc}"
                    outcome = call_all([lambda f=factory: f(**e.options)], e.step_timeout_s)[0]
                    if not outcome.ok:
                        return f"{label} cannot be built from environment.options {e.options}: {_why(outcome, e)}"
                    missing = [m for m in ("reset", "step") if not callable(getattr(outcome.value, m, None))]
                    if missing:
                        return (f"{label} built a {type(outcome.value).__name__}, which has no {missing[0]}() method: an environment "
                                "needs reset(row, seed) and step(action) (grpokit.envs.base), or is a gymnasium.Env")
                    built[key] = outcome.value
                seed = e.heldout_seed if split == "heldout" else 0
                outcome = call_all([lambda env=built[key], r=row: reset_result(env.reset(r, seed))[0]], e.step_timeout_s)[0]
                if not outcome.ok:
                    return (f"{label} cannot start an episode from {split} row {i} ({_why(outcome, e)}): "
                            f"give the rows the columns it reads (data.task / data.path) or fix environment.name / environment.options")
                if is_placeholder(row) and not outcome.value:
                    return (f"{label} reset() returned no first observation, and the run has no data (data.task and data.path "
                            "are null) whose prompt could be one: return the first observation from reset() or set data.task / data.path")
    finally:
        for env in built.values():
            if callable(getattr(env, "close", None)):
                call_all([env.close], e.step_timeout_s)
    return None


def _field(own: Any, configured: Any) -> str:
    """How a message names a row's environment: ``environment.name``, or the row's own ``environment`` column (``own``)."""
    from grpokit.envs.base import environment_label

    if not own or own == configured:
        return f"environment.name '{environment_label(configured)}'"
    return f"environment '{own}' (the rows' environment column)"


def _answer_reward(cfg: Any) -> Optional[str]:
    """Why a reward of an environment-only run cannot score (it reads the rows' ``answer``, which placeholder rows lack), or None."""
    import inspect

    from grpokit.rewards import resolve_reward

    for i, r in enumerate(cfg.rewards):
        try:
            params = inspect.signature(resolve_reward(r.name)).parameters
        except (ValueError, TypeError):
            continue  # a reward that cannot load is refused by its own check, naming it
        if "answer" in params and not r.kwargs.get("missing_ok"):
            return (f"rewards[{i}] '{r.name}' reads the rows' answer column, and an environment-only run (data.task and data.path "
                    "null) has none: score the episodes with {name: env_return} or {name: env_info, kwargs: {key: ...}}")
    return None


def _why(outcome: Any, e: Any) -> str:
    return f"no answer within environment.step_timeout_s={e.step_timeout_s:g} s" if outcome.timed_out else f"{outcome.error}"
