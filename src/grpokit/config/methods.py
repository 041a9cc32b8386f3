"""Load-time refusal of config fields that the run's chosen methods would not read, or read wrongly.

A config field either changes the run or is refused here, in one line naming the field and the
fix, before any model loads. What each registered method reads is read from its registration,
never from its name:

* ``algorithm.epsilon_low/high``, ``scale``, ``std_mode``, ``std_eps``, ``kl_clamp`` reach a
  method as context keywords; a field set away from its default whose keyword the chosen method
  does not take (:meth:`~grpokit.registry.Registry.context_taken`, with the registration's
  ``reads_if``) is refused.
* ``algorithm.ratio``: the loss's declared ``ratios``; ``algorithm.aggregation``: the loss's
  declared ``aggregations`` and, for a loss that differentiates through the ratio, the ratio's.
* A ``loss_options`` / ``advantage_options`` key that the method's ``reads_if`` switches off
  under the run's other values (KDRL's ``kd_estimator`` with ``kd_placement: reward``).
* ``algorithm.kl`` / ``kl_clamp`` act only with ``beta > 0``; ``beta > 0`` needs a KL estimator.
* ``algorithm.entropy_band_quantiles`` act only with ``entropy_band_coef > 0``;
  ``max_sampling_rounds`` only with ``dynamic_sampling``; ``correction_options`` under ``auto``
  are decoupled's; ``plan_delimiter`` / ``ref_sync_every`` need a method that reads the plan
  mask / the reference; ``entropy_coef`` / ``entropy_band_coef`` a policy whose forward gives
  entropies.
* ``algorithm.token_weights`` other than 'all' for a loss declared ``token_level=False`` (one
  sequence value broadcast to its tokens: DisCO, Reg-GRPO).
* A curriculum's options its constructor refuses (built once at load, without data or model).
* A combiner declared ``step_scale`` (one number per step times every reward) under an advantage
  that divides by a reward std, which cancels it.
"""

from __future__ import annotations

from typing import Any, Optional

from grpokit.config.schema import AlgorithmConfig, Config
from grpokit.registry import describe_switch

# algorithm field -> (axis, the context keyword it is passed to that axis's method as)
CONTEXT_FIELDS = {
    "epsilon_low": ("loss", "epsilon_low"),
    "epsilon_high": ("loss", "epsilon_high"),
    "scale": ("advantage", "scale"),
    "std_mode": ("advantage", "std_mode"),
    "std_eps": ("advantage", "std_eps"),
    "kl_clamp": ("kl", "clamp"),
}


def method_problem(cfg: Config) -> Optional[str]:
    """The first field of ``cfg.algorithm`` that its chosen methods would ignore or misread, as one line; None if none."""
    for check in (_kl_problem, _ratio_problem, _aggregation_problem, _context_problem, _entropy_band_problem,
                  _sampling_rounds_problem, _auto_correction_problem):
        problem = check(cfg.algorithm)
        if problem is not None:
            return problem
    return (_switched_off_option(cfg) or _unread_input_problem(cfg) or _cancelled_combiner_problem(cfg)
            or _trainer_option_problem(cfg) or _curriculum_problem(cfg))


def _curriculum_problem(cfg: Config) -> Optional[str]:
    """What the curriculum refuses in its options (ranges, min_buffer above window, a hook that does not import), at load."""
    from grpokit.registries import get_registry

    if not cfg.data.curriculum:
        return None
    try:  # a curriculum is cheap to build (no data, no model): the trainer builds it again after the model loads
        get_registry("curriculum").get(cfg.data.curriculum)(**cfg.data.curriculum_options)
    except (ValueError, TypeError) as exc:
        return str(exc) if str(exc).startswith("data.") else f"data.curriculum_options: {exc}"
    return None


# reward_combiner.options keys read by the trainer's producer of an input, not by the combiner
PRODUCER_OPTIONS = {"grad_param_pattern": "objective_grads", "grad_micro_batches": "objective_grads", "validation_prompts": "validation"}


def _trainer_option_problem(cfg: Config) -> Optional[str]:
    """A producer option (``validation_prompts``, ``grad_*``) for a combiner that does not declare that producer's input."""
    from grpokit.registries import get_registry

    name = cfg.reward_combiner.name
    inputs = get_registry("combiner").spec(name).inputs
    for key, needed in PRODUCER_OPTIONS.items():
        if key in cfg.reward_combiner.options and needed not in inputs:
            users = [n for n in get_registry("combiner").names() if needed in get_registry("combiner").spec(n).inputs]
            return (f"reward_combiner.options.{key} sets the producer of '{needed}', which combiner '{name}' does not read: "
                    f"remove it, or use {' / '.join(users)}")
    r = cfg.rollout
    parts = -(-r.prompts_per_step * r.group_size // cfg.train.micro_batch_size)  # micro-batches of a step's batch
    wanted = int(cfg.reward_combiner.options.get("grad_micro_batches", 1))
    if wanted > parts:  # objective_gradients takes the first `wanted` micro-batches: the rest do not exist
        return (f"reward_combiner.options.grad_micro_batches = {wanted} exceeds the {parts} micro-batch(es) of a step "
                f"(rollout.prompts_per_step x rollout.group_size / train.micro_batch_size): set it to at most {parts}")
    return None


def _cancelled_combiner_problem(cfg: Config) -> Optional[str]:
    """A combiner whose only effect is a per-step scale, under an advantage that divides by a reward std (it cancels it)."""
    from grpokit.registries import get_registry

    a, name = cfg.algorithm, cfg.reward_combiner.name
    if not get_registry("combiner").spec(name).step_scale:
        return None
    values = {**a.advantage_options, **{k: getattr(a, f) for f, (ax, k) in CONTEXT_FIELDS.items() if ax == "advantage"}}
    if "std_eps" not in get_registry("advantage").context_taken(a.advantage, values):
        return None
    return (f"reward_combiner.name '{name}' scales each step's rewards by one number, which algorithm.advantage "
            f"'{a.advantage}' divides out again (it divides by a reward std): use advantage dr_grpo, grpo with scale none, or rloo")


def _sampling_rounds_problem(a: AlgorithmConfig) -> Optional[str]:
    if not a.dynamic_sampling and _changed(a, "max_sampling_rounds"):
        return (f"algorithm.max_sampling_rounds = {a.max_sampling_rounds} is read only with algorithm.dynamic_sampling=true: "
                "set it or remove max_sampling_rounds")
    return None


def _auto_correction_problem(a: AlgorithmConfig) -> Optional[str]:
    """``correction: auto`` applies 'decoupled' to off-policy batches: its options are decoupled's (checked here; other names in check_run)."""
    from grpokit.registries import get_registry

    if a.correction != "auto":
        return None
    try:
        get_registry("correction").check_options("decoupled", a.correction_options, "algorithm.correction_options (auto = decoupled when off-policy)")
    except ValueError as exc:
        return str(exc)
    return None


def _unread_input_problem(cfg: Config) -> Optional[str]:
    """A field that only produces an input (plan spans, a synced reference) that none of the chosen methods reads."""
    from grpokit.trainer.inputs import MISSING, needed_inputs

    a, needed = cfg.algorithm, needed_inputs(cfg)
    for field in ("entropy_coef", "entropy_band_coef"):  # the learner adds them only where its forward gives entropies
        why = MISSING["entropy"](cfg) if getattr(a, field) > 0 and cfg.rollout.backend == "hf" else None
        if why is not None:  # (an engine sampler without entropies still leaves the learner's own forward)
            return f"algorithm.{field} = {getattr(a, field)} needs per-unit entropies: {why}"
    if a.plan_delimiter and "plan_mask" not in needed:
        return (f"algorithm.plan_delimiter {a.plan_delimiter!r} marks planning spans, which algorithm.loss '{a.loss}' and "
                f"algorithm.ratio '{a.ratio}' do not read: use loss ts_grpo or ratio span, or remove plan_delimiter")
    if a.ref_sync_every and "ref_logp" not in needed:
        return (f"algorithm.ref_sync_every = {a.ref_sync_every} syncs a reference that nothing reads here (beta is {a.beta}, "
                f"loss '{a.loss}'): use loss humanline or algorithm.beta > 0, or set ref_sync_every=0")
    return None


def _changed(a: AlgorithmConfig, field: str) -> bool:
    return getattr(a, field) != getattr(AlgorithmConfig(), field)


def _kl_problem(a: AlgorithmConfig) -> Optional[str]:
    from grpokit.registries import get_registry

    if a.beta == 0:
        for field in ("kl", "kl_clamp"):
            if _changed(a, field):
                return (f"algorithm.{field} = {getattr(a, field)!r} is read only when algorithm.beta > 0, and beta is 0: "
                        f"set algorithm.beta > 0 or remove algorithm.{field}")
        return None
    kl = get_registry("kl")
    if not kl.spec(a.kl).inputs:  # an estimator that reads no reference adds nothing
        real = [n for n in kl.names() if kl.spec(n).inputs]
        return (f"algorithm.beta = {a.beta} with algorithm.kl '{a.kl}' adds no KL term: choose algorithm.kl from "
                f"{', '.join(real)}, or set algorithm.beta=0")
    return None


def _ratio_problem(a: AlgorithmConfig) -> Optional[str]:
    from grpokit.registries import get_registry

    losses = get_registry("loss")
    ratios = losses.spec(a.loss).ratios
    if ratios is None or a.ratio in ratios:
        return None
    honour = [n for n in losses.names() if losses.spec(n).ratios is None or a.ratio in losses.spec(n).ratios]
    return (f"algorithm.ratio '{a.ratio}' is not read by algorithm.loss '{a.loss}' (it computes with "
            f"{' / '.join(ratios)}): set algorithm.ratio={ratios[-1]}, or choose a loss that honours '{a.ratio}': {', '.join(honour)}")


def _aggregation_problem(a: AlgorithmConfig) -> Optional[str]:
    from grpokit.registries import get_registry

    spec = get_registry("loss").spec(a.loss)
    if spec.aggregations is not None and a.aggregation not in spec.aggregations:
        return (f"algorithm.aggregation '{a.aggregation}' does not give algorithm.loss '{a.loss}' its objective "
                f"(its per-token values are built for {' / '.join(spec.aggregations)}): set algorithm.aggregation={spec.aggregations[0]}")
    if not spec.token_level and a.token_weights != "all":
        return (f"algorithm.token_weights '{a.token_weights}' weights tokens, but algorithm.loss '{a.loss}' gives every token "
                "of a sequence one sequence-level value (the weights would only rescale it): set algorithm.token_weights=all")
    needed = get_registry("ratio").spec(a.ratio).aggregations
    if spec.ratios is None and spec.ratio_gradient and needed is not None and a.aggregation not in needed:
        return (f"algorithm.ratio '{a.ratio}' gives algorithm.loss '{a.loss}' its sequence-level gradient only under "
                f"aggregation {' / '.join(needed)} (with '{a.aggregation}' each sequence weighs by its length): "
                f"set algorithm.aggregation={needed[0]}")
    return None


def _context_problem(a: AlgorithmConfig) -> Optional[str]:
    from grpokit.registries import get_registry

    chosen = {"loss": (a.loss, a.loss_options), "advantage": (a.advantage, a.advantage_options), "kl": (a.kl, {})}
    for field, (axis, key) in CONTEXT_FIELDS.items():
        if not _changed(a, field) or (axis == "kl" and a.beta == 0):  # kl fields with beta 0: _kl_problem
            continue
        name, options = chosen[axis]
        registry = get_registry(axis)
        values: dict[str, Any] = {**options, **{k: getattr(a, f) for f, (ax, k) in CONTEXT_FIELDS.items() if ax == axis}}
        if key in registry.context_taken(name, values):
            continue
        switch = dict(registry.spec(name).props.get("reads_if") or {}).get(key)
        when = f" unless {switch[0]} is {describe_switch(switch[1])}" if switch else ""
        return (f"algorithm.{field} = {getattr(a, field)!r} is not read by algorithm.{axis} '{name}'{when}: "
                f"remove it, or choose an algorithm.{axis} that reads it")
    return None


def _switched_off_option(cfg: Config) -> Optional[str]:
    """A key of an option bag that the method's ``reads_if`` switches off under the run's other values."""
    from grpokit.registries import get_registry

    a, c, d = cfg.algorithm, cfg.reward_combiner, cfg.data
    bags = {"loss": (a.loss, a.loss_options, "algorithm.loss_options", "algorithm.loss"),
            "advantage": (a.advantage, a.advantage_options, "algorithm.advantage_options", "algorithm.advantage"),
            "combiner": (c.name, c.options, "reward_combiner.options", "reward_combiner.name")}
    if d.curriculum:
        bags["curriculum"] = (d.curriculum, d.curriculum_options, "data.curriculum_options", "data.curriculum")
    for axis, (name, options, where, field) in bags.items():
        values = {**options, **{k: getattr(a, f) for f, (ax, k) in CONTEXT_FIELDS.items() if ax == axis}}
        off = sorted(set(options) & get_registry(axis).switched_off(name, values))
        if off:
            switch, on = get_registry(axis).spec(name).props["reads_if"][off[0]]
            return (f"{where}.{off[0]} is read by {field} '{name}' only when {switch} is {describe_switch(on)} "
                    f"(it is {values.get(switch, 'its default')!r}): remove it or set {where}.{switch}")
    return None


def _entropy_band_problem(a: AlgorithmConfig) -> Optional[str]:
    if a.entropy_band_coef == 0 and _changed(a, "entropy_band_quantiles"):
        return (f"algorithm.entropy_band_quantiles = {a.entropy_band_quantiles} are read only when algorithm.entropy_band_coef > 0: "
                "set algorithm.entropy_band_coef or remove the quantiles")
    return None
