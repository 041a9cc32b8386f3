"""TRL's ``GRPOTrainer`` configured from a grpokit config: the pieces the benchmarks share.

``step_vs_trl.py`` (seconds per step) and ``efficacy.py`` (accuracy per minute) both run TRL on
exactly the task a grpokit config describes:

* :func:`trl_dataset`: the training rows as TRL's conversational prompt-only format
  (``prompt = [{"role": "user", ...}]``, preceded by ``data.system_prompt`` when one is set), so
  TRL applies the same chat template grpokit's ``render_prompt`` applies; every other row column
  (``answer``, ``numbers``, ...) is a dataset column and reaches the rewards as a keyword.
* :func:`trl_reward_funcs`: grpokit's own reward functions (``setup.build_rewards``) wrapped for
  TRL's calling convention (conversational completions -> their text), with their weights.
* :func:`grpo_config_kwargs`: the ``GRPOConfig`` fields a grpokit config determines (sampling,
  optimiser, schedule, clip, KL, aggregation, advantage scaling). A config TRL cannot express
  exactly (another advantage, ratio or loss) raises instead of silently running something else.

No TRL import at module level: the grpokit side of a benchmark runs without the ``bench`` extra.
"""

from __future__ import annotations

from typing import Any, Callable

# grpokit algorithm.aggregation -> TRL loss_type (same normaliser; TRL's "dapo" divides by the
# active tokens of the whole accumulated batch, as grpokit's token_mean does)
LOSS_TYPES = {"seq_mean_token_mean": "grpo", "token_mean": "dapo", "constant": "dr_grpo"}
# grpokit algorithm.scale -> TRL scale_rewards
SCALES = {"group": "group", "batch": "batch", "none": "none"}
# grpokit optim.schedule -> TRL lr_scheduler_type (HF names), without and with warm-up steps
SCHEDULES = {"constant": ("constant", "constant_with_warmup"), "cosine": ("cosine", "cosine"), "linear": ("linear", "linear")}


def trl_dataset(rows: list[dict], system_prompt: str | None):
    """A ``datasets.Dataset`` of TRL conversational prompts with the rows' other columns."""
    from datasets import Dataset

    def messages(text: str) -> list[dict]:
        head = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
        return head + [{"role": "user", "content": text}]

    return Dataset.from_list([{**row, "prompt": messages(row["prompt"])} for row in rows])


def _text(item: Any) -> str:
    """A TRL prompt or completion as text: conversational ones are lists of messages (the last one's content)."""
    return item[-1]["content"] if isinstance(item, list) else item


def trl_reward_funcs(rewards: list, columns: list[str]) -> tuple[list[Callable], list[float]]:
    """grpokit ``NamedReward`` s as TRL reward functions (named alike) and their weights.

    TRL calls ``fn(prompts, completions, completion_ids, **dataset_columns, trainer_state=...)``;
    each wrapper passes grpokit's function the texts and only the dataset's own ``columns``.
    A score of None (not applicable) becomes 0.0, as grpokit's total counts it.
    """

    def wrap(named) -> Callable:
        def reward(prompts, completions, **kw):
            cols = {k: v for k, v in kw.items() if k in columns}
            scores = named.fn([_text(p) for p in prompts], [_text(c) for c in completions], **cols)
            return [0.0 if s is None else float(s) for s in scores]

        reward.__name__ = named.name
        return reward

    return [wrap(r) for r in rewards], [float(r.weight) for r in rewards]


def grpo_config_kwargs(cfg) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments that reproduce ``cfg`` 's sampling, optimiser and GRPO objective.

    The caller adds what is its own choice (output folder, device, batch sizes, steps, logging).
    Raises ValueError for a config TRL has no exact equivalent of.
    """
    algo, optim, roll = cfg.algorithm, cfg.optim, cfg.rollout
    unsupported = [
        f"{name}={value!r}" for name, value, ok in (
            ("algorithm.advantage", algo.advantage, algo.advantage in ("grpo", "dr_grpo")),
            ("algorithm.loss", algo.loss, algo.loss == "ppo_clip"),
            ("algorithm.ratio", algo.ratio, algo.ratio == "token"),
            ("algorithm.token_weights", algo.token_weights, algo.token_weights == "all"),
            ("algorithm.aggregation", algo.aggregation, algo.aggregation in LOSS_TYPES),
            ("algorithm.scale", algo.scale, algo.scale in SCALES),
            ("algorithm.std_mode", algo.std_mode, algo.std_mode == "unbiased"),  # TRL: torch.std (unbiased)
            ("algorithm.kl", algo.kl, algo.beta == 0 or algo.kl == "k3"),
            ("algorithm.loss_options", algo.loss_options, not algo.loss_options),
            ("algorithm.dynamic_sampling", algo.dynamic_sampling, not algo.dynamic_sampling),
            ("algorithm.overlong_cache", algo.overlong_cache, not algo.overlong_cache),
            ("algorithm.entropy_coef", algo.entropy_coef, not algo.entropy_coef),
            ("algorithm.ref_sync_every", algo.ref_sync_every, not algo.ref_sync_every),
        ) if not ok
    ]
    if unsupported:
        raise ValueError(f"TRL's GRPOTrainer has no exact equivalent of {', '.join(unsupported)}")
    plain, warm = SCHEDULES[optim.schedule]
    return dict(
        seed=cfg.train.seed,
        num_generations=roll.group_size,
        max_completion_length=roll.max_new_tokens,
        temperature=roll.temperature,
        top_p=roll.top_p,
        top_k=roll.top_k,
        learning_rate=optim.lr,
        lr_scheduler_type=warm if optim.warmup_steps else plain,
        warmup_steps=optim.warmup_steps,
        weight_decay=optim.weight_decay,
        adam_beta1=optim.betas[0],
        adam_beta2=optim.betas[1],
        max_grad_norm=optim.max_grad_norm,
        beta=algo.beta,
        num_iterations=algo.num_iterations,
        epsilon=algo.epsilon_low,
        epsilon_high=algo.epsilon_high,
        loss_type=LOSS_TYPES[algo.aggregation],
        scale_rewards=SCALES[algo.scale],
        mask_truncated_completions=algo.mask_truncated,
    )
