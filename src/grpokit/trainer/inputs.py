"""Who produces each input a registered method may declare, and the load-time check of a run.

A registered loss, ratio, KL estimator, token weighting, advantage, combiner or correction
declares the inputs it reads (``register(name, inputs=(...))``). This table maps each input to
the code that produces it and to the reason a given run cannot (``missing``: the fix, in one
line, or None). :func:`check_run` walks the run's chosen methods before any model is loaded and
refuses a method whose input has no producer, and any option key its function does not take.

| input          | produced by                                                           |
|----------------|-----------------------------------------------------------------------|
| group_ids, rewards, completion_ids | the rollout batch / the reward stage               |
| entropy        | the sampler (``Policy.capabilities.entropy``) and the learner forward |
| domains        | the data's ``domain`` column                                          |
| old_logp       | ``producers.score_inputs``: proximal log-probs (mu > 1), else detached |
| ref_logp       | ``producers.score_inputs``: the reference role of the policy          |
| teacher_logp   | ``producers.score_inputs``: the teacher role (``model.teacher``)      |
| behaviour_logp | the sampler's recorded log-probs (``RolloutBatch.behaviour_logp``)    |
| plan_mask      | ``spans.plan_mask`` (``algorithm.plan_delimiter``)                   |
| verif_mask, verif_adv | ``verification.VerificationStage`` (``verification.enabled``) |
| constraint_kl  | ``producers.constraint_kl`` before each update after the first       |
| objective_grads| ``producers.objective_gradients`` (per-objective policy gradients)   |
| validation     | ``producers.validation_means`` (per-objective means)                  |
| aux_logp       | a policy whose ``score`` takes a transformed condition (vision-language) |
"""

from __future__ import annotations

from typing import Callable, Optional

from grpokit.config.schema import Config

Missing = Callable[[Config], Optional[str]]


def _always(cfg: Config) -> Optional[str]:
    return None


def _capabilities(cfg: Config):
    """The capabilities the run's policy family declares (the text causal-LM family with its sampler)."""
    from grpokit.policies.causal_lm import CausalLMPolicy

    return CausalLMPolicy.capabilities_for(cfg.rollout.backend)


def _entropy(cfg: Config) -> Optional[str]:
    if not _capabilities(cfg).entropy:
        return f"rollout.backend={cfg.rollout.backend} returns no per-token entropies: set rollout.backend=hf"
    return None


def _teacher(cfg: Config) -> Optional[str]:
    return None if cfg.model.teacher else "set model.teacher to a model that shares the policy's tokenizer (e.g. a checkpoint folder)"


def _plan(cfg: Config) -> Optional[str]:
    if not cfg.algorithm.plan_delimiter:
        return "set algorithm.plan_delimiter (the text that ends the planning span)"
    return None


def _verification(cfg: Config) -> Optional[str]:
    return None if cfg.verification.enabled else "set verification.enabled=true (one self-verification per solution)"


def _aux(cfg: Config) -> Optional[str]:
    if _capabilities(cfg).condition_override:
        return None
    return ("it needs a second forward on a transformed condition (a masked image), which only a vision-language "
            "policy gives; the text policy and this data have no image column")


MISSING: dict[str, Missing] = {
    "group_ids": _always, "rewards": _always, "completion_ids": _always, "domains": _always,
    "entropy": _entropy, "old_logp": _always, "ref_logp": _always, "behaviour_logp": _always,
    "teacher_logp": _teacher, "plan_mask": _plan, "verif_mask": _verification, "verif_adv": _verification,
    "constraint_kl": _always, "objective_grads": _always, "validation": _always, "aux_logp": _aux,
}


class RunContractError(ValueError):
    """A run whose chosen method lacks an input or has an unknown option; one line with the fix."""


def chosen_methods(cfg: Config) -> list[tuple[str, str, str, dict]]:
    """``(axis, name, config field, options)`` for every registered method the run uses."""
    a = cfg.algorithm
    methods = [
        ("loss", a.loss, "algorithm.loss", a.loss_options),
        ("ratio", a.ratio, "algorithm.ratio", {}),
        ("advantage", a.advantage, "algorithm.advantage", a.advantage_options),
        ("token_weights", a.token_weights, "algorithm.token_weights", a.token_weights_options),
        ("combiner", cfg.reward_combiner.name, "reward_combiner.name", cfg.reward_combiner.options),
    ]
    if a.beta > 0:
        methods.append(("kl", a.kl, "algorithm.kl", {}))
    if a.correction != "auto":
        methods.append(("correction", a.correction, "algorithm.correction", a.correction_options))
    if cfg.data.curriculum:
        methods.append(("curriculum", cfg.data.curriculum, "data.curriculum", cfg.data.curriculum_options))
    return methods


# Option keys read by the trainer itself (the producer of objective_grads), not by the registered function.
TRAINER_OPTIONS = {"combiner": ("grad_param_pattern", "grad_micro_batches")}


def check_run(cfg: Config) -> None:
    """Refuse, in one line, a method whose input nothing produces here or an option its function does not take."""
    from grpokit.registries import get_registry

    for axis, name, where, options in chosen_methods(cfg):
        registry = get_registry(axis)
        spec = registry.spec(name)
        for needed in spec.inputs:
            why = MISSING[needed](cfg)
            if why is not None:
                raise RunContractError(f"{where} '{name}' needs input '{needed}', which this run does not produce: {why}")
        own = {k: v for k, v in options.items() if k not in TRAINER_OPTIONS.get(axis, ())}
        option_field = {"loss": "algorithm.loss_options", "advantage": "algorithm.advantage_options",
                        "token_weights": "algorithm.token_weights_options", "combiner": "reward_combiner.options",
                        "correction": "algorithm.correction_options", "curriculum": "data.curriculum_options"}.get(axis, where)
        try:
            registry.check_options(name, own, option_field)
        except ValueError as exc:
            raise RunContractError(str(exc)) from None
    if get_registry("loss").spec(cfg.algorithm.loss).groupwise and cfg.train.micro_batch_size % cfg.rollout.group_size:
        raise RunContractError(
            f"algorithm.loss '{cfg.algorithm.loss}' needs whole groups per micro-batch: make train.micro_batch_size "
            f"a multiple of rollout.group_size ({cfg.rollout.group_size})"
        )


def check_data(cfg: Config, rows: list[dict]) -> None:
    """Refuse, in one line, a method whose input comes from a data column the training rows lack."""
    if "domains" in needed_inputs(cfg) and rows and any(row.get("domain") is None for row in rows):
        missing = sum(row.get("domain") is None for row in rows)
        raise RunContractError(
            f"algorithm.advantage '{cfg.algorithm.advantage}' needs input 'domains', which this run does not produce: "
            f"{missing} of {len(rows)} training rows have no 'domain' column (add one, e.g. a domain per task)"
        )


def needed_inputs(cfg: Config) -> set[str]:
    """Every input the run's methods declare (what the producers must fill)."""
    from grpokit.registries import get_registry

    specs = [get_registry(axis).spec(name) for axis, name, _, _ in chosen_methods(cfg)]
    return {i for spec in specs for i in spec.inputs + spec.optional}
