"""Load-time checks of a multi-turn run: one line naming the field, before anything loads."""

from __future__ import annotations

from typing import Any, Optional


def environment_problem(cfg: Any) -> Optional[str]:
    """Why ``cfg`` cannot run environment episodes as configured (one line), or None."""
    e = cfg.environment
    if not e.name:
        episodic = [r.name for r in cfg.rewards if r.name in ("env_return", "env_info")]
        if episodic:
            return f"reward '{episodic[0]}' reads an environment episode, but environment.name is null: set environment.name or drop the reward"
        return None
    from grpokit.envs.base import ENVIRONMENTS, environment_factory

    try:
        environment_factory(e.name)
    except ValueError as exc:
        return f"environment.name: {exc}"
    if e.name in ENVIRONMENTS:
        try:
            ENVIRONMENTS.check_options(e.name, e.options, "environment.options")
        except ValueError as exc:
            return str(exc)
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
    if e.max_episode_tokens < cfg.rollout.max_new_tokens:
        return (f"environment.max_episode_tokens ({e.max_episode_tokens}) is below one turn's cap rollout.max_new_tokens "
                f"({cfg.rollout.max_new_tokens}): raise it")
    return None
