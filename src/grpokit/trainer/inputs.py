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
| prev_logp      | ``producers.score_inputs``: the 'previous' role (weights before the last update) |
| teacher_logp   | ``producers.score_inputs``: the teacher role (``model.teacher``)      |
| behaviour_logp | the sampler's recorded log-probs (``RolloutBatch.behaviour_logp``)    |
| plan_mask      | ``spans.plan_mask`` (``algorithm.plan_delimiter``)                   |
| verif_mask, verif_adv | ``verification.VerificationStage`` (``verification.enabled``) |
| constraint_kl  | ``producers.constraint_kl`` before each update after the first       |
| objective_grads| ``producers.objective_gradients`` (per-objective policy gradients)   |
| validation     | ``producers.validation_means``: a held-out validation batch's means   |
| aux_logp       | a policy whose ``score`` takes a transformed condition (vision-language) |
"""

from __future__ import annotations

from typing import Callable, Optional

from grpokit.config.schema import Config

Missing = Callable[[Config], Optional[str]]


def _always(cfg: Config) -> Optional[str]:
    return None


def _capabilities(cfg: Config):
    """The capabilities the run's policy family declares (``model.family``, else the family that claims ``model.name``)."""
    return run_family(cfg).capabilities(cfg)


def run_family(cfg: Config, model=None, tokenizer=None):
    """The run's :class:`~grpokit.families.Family` (of ``model`` when one is passed from Python, else of ``model.name``).

    A model no family claims (or two alike) is a one-line RunContractError. With ``model.family:
    auto`` the family found is written into ``cfg.model.family``, so every later check, the saved
    config.yaml and a resumed run use the same family.
    """
    from grpokit.config.loading import load_config_plugins
    from grpokit.families import family_of

    load_config_plugins(cfg.plugins)  # a Config built in Python has not been through load_config (imports are cached)
    try:
        family = family_of(cfg, model, tokenizer)
    except ValueError as exc:
        raise RunContractError(str(exc)) from None
    if (cfg.model.family or "auto") == "auto":
        cfg.model.family = family.name
    return family


def _entropy(cfg: Config) -> Optional[str]:
    if not _capabilities(cfg).entropy and cfg.rollout.backend == "hf":
        return f"the policy of model.name '{cfg.model.name}' gives no per-unit entropies: choose a method that does not need them"
    if not _capabilities(cfg).entropy:
        return f"rollout.backend={cfg.rollout.backend} returns no per-token entropies: set rollout.backend=hf"
    return None


TEACHER_RECIPE = "train one first (`grpokit train --preset demo` writes runs/demo) and set model.teacher=runs/demo"


def _teacher(cfg: Config) -> Optional[str]:
    """A teacher that exists and is not the student's own starting weights (that would distil nothing)."""
    from pathlib import Path

    from grpokit.model.loading import EMBEDDED_MODELS
    from grpokit.trainer.checkpoint import CheckpointError, model_source

    teacher = cfg.model.teacher
    if not teacher:
        return f"set model.teacher to a model that shares the policy's tokenizer: {TEACHER_RECIPE}"
    if teacher not in EMBEDDED_MODELS and not Path(teacher).expanduser().exists():
        return f"model.teacher '{teacher}' does not exist: {TEACHER_RECIPE}"
    try:
        source = model_source(teacher)
    except CheckpointError as exc:
        return f"model.teacher: {exc}"
    same = source == cfg.model.name or (
        Path(source).expanduser().exists() and Path(cfg.model.name).expanduser().exists()
        and Path(source).expanduser().resolve() == Path(cfg.model.name).expanduser().resolve()
    )
    if same:
        return f"model.teacher '{teacher}' is the policy's own starting model (model.name), so the teacher equals the student: {TEACHER_RECIPE}"
    return None


def _plan(cfg: Config) -> Optional[str]:
    if not cfg.algorithm.plan_delimiter:
        return "set algorithm.plan_delimiter (the text that ends the planning span)"
    return None


def _verification(cfg: Config) -> Optional[str]:
    return None if cfg.verification.enabled else "set verification.enabled=true (one self-verification per solution)"


def _heldout(cfg: Config) -> Optional[str]:
    d = cfg.data
    if d.heldout_path or (d.path and d.heldout_fraction > 0) or (not d.path and d.task and d.n_heldout > 0):
        return None
    return "its validation batch is drawn from the held-out rows: set data.n_heldout > 0, data.heldout_fraction > 0 or data.heldout_path"


def _aux(cfg: Config) -> Optional[str]:
    if _capabilities(cfg).condition_override:
        return None
    return ("it needs a second forward on a transformed condition (a masked image), which only a vision-language "
            f"policy gives; model.name '{cfg.model.name}' is a text policy: use a Qwen2-VL folder or tiny-qwen2vl, with image rows")


def _previous(cfg: Config) -> Optional[str]:
    if _capabilities(cfg).previous_role:
        return None
    return (f"it scores the policy one optimizer update behind (the 'previous' role), which the {run_family(cfg).name} "
            "policy does not score: use a text or vision-language policy, or another loss")


MISSING: dict[str, Missing] = {
    "group_ids": _always, "rewards": _always, "completion_ids": _always, "domains": _always,
    "entropy": _entropy, "old_logp": _always, "prev_logp": _previous, "ref_logp": _always, "behaviour_logp": _always,
    "teacher_logp": _teacher, "plan_mask": _plan, "verif_mask": _verification, "verif_adv": _verification,
    "constraint_kl": _always, "objective_grads": _always, "validation": _heldout, "aux_logp": _aux,
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


# Option keys read by the trainer itself (the producers of objective_grads / validation), not by the registered function.
TRAINER_OPTIONS = {"combiner": ("grad_param_pattern", "grad_micro_batches", "validation_prompts")}


def check_run(cfg: Config) -> None:
    """Refuse, in one line, a method whose input nothing produces here or an option its function does not take."""
    from grpokit.registries import get_registry

    family = run_family(cfg)
    problem = family.requirement_problem(cfg)  # first of all: a missing optional dependency, the one-line install hint
    if problem is not None:
        raise RunContractError(problem)
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
    from grpokit.config.methods import method_problem  # a field the chosen methods would ignore or misread

    problem = method_problem(cfg) or cfg.train.streaming_problem()
    if problem is not None:
        raise RunContractError(problem)
    if cfg.data.demonstrations and cfg.stage != "sft":
        raise RunContractError(f"data.demonstrations '{cfg.data.demonstrations}' writes completions for stage sft; stage '{cfg.stage}' does not read them: set data.demonstrations=null or stage=sft")
    from grpokit.envs.checks import environment_problem

    for problem in (environment_problem(cfg), family.config_problem(cfg), foreign_section_problem(cfg, family)):
        if problem is not None:
            raise RunContractError(problem)
    if cfg.variational.enabled:
        from grpokit.trainer.variational import config_problem

        problem = config_problem(cfg)
        if problem is not None:
            raise RunContractError(problem)
    problem = mini_batch_problem(cfg)
    if problem is not None:
        raise RunContractError(problem)
    if get_registry("loss").spec(cfg.algorithm.loss).groupwise and cfg.train.micro_batch_size % cfg.rollout.group_size:
        raise RunContractError(
            f"algorithm.loss '{cfg.algorithm.loss}' needs whole groups per micro-batch: make train.micro_batch_size "
            f"a multiple of rollout.group_size ({cfg.rollout.group_size})"
        )


def mini_batch_problem(cfg: Config) -> Optional[str]:
    """The one-line error of an ``algorithm.mini_batches`` split this run cannot make; None if none."""
    k = cfg.algorithm.mini_batches
    if k == 1:
        return None
    if cfg.rollout.prompts_per_step < k:
        return (f"algorithm.mini_batches={k} cuts a step's {cfg.rollout.prompts_per_step} groups into whole-group mini-batches: "
                f"set rollout.prompts_per_step >= {k} or lower algorithm.mini_batches")
    for enabled, field in ((cfg.verification.enabled, "verification.enabled"), (cfg.variational.enabled, "variational.enabled")):
        if enabled:
            return (f"algorithm.mini_batches={k}: {field} trains on rows normalised over the whole batch, which is not split into "
                    "mini-batches: set algorithm.mini_batches=1")
    return None


def foreign_section_problem(cfg: Config, family) -> Optional[str]:
    """A field set in another family's config section (e.g. ``vision.*`` for a text policy): nothing would read it."""
    import dataclasses

    from grpokit.families import FAMILIES

    for section in sorted({s for f in FAMILIES for s in f.sections} - set(family.sections)):
        values = getattr(cfg, section, None)
        if values is None:
            continue
        default = type(values)()
        for f in dataclasses.fields(values):
            if getattr(values, f.name) != getattr(default, f.name):
                owners = sorted(f2.name for f2 in FAMILIES if section in f2.sections)
                return (f"{section}.{f.name} is set, but the {section} section is read only by the {' / '.join(owners)} "
                        f"famil{'ies' if len(owners) > 1 else 'y'} and this run's policy is '{family.name}' (model.name "
                        f"'{cfg.model.name}'): remove it, or train a model of that family")
    return None


def check_data(cfg: Config, rows: list[dict]) -> None:
    """Refuse, in one line, a method whose input comes from a data column the training rows lack."""
    if cfg.variational.enabled and rows and any(row.get("answer") is None for row in rows):
        missing = sum(row.get("answer") is None for row in rows)
        raise RunContractError(
            f"variational.enabled needs the reference answer of every training row (its posterior is prompted with it): "
            f"{missing} of {len(rows)} rows have no 'answer' (set data.answer_column to the column that holds it)"
        )
    from grpokit.data.chat import is_visual

    visual = [i for i, row in enumerate(rows) if is_visual(row)]
    if visual and not _capabilities(cfg).visual_input:
        i = visual[0]
        column = "images" if rows[i].get("images") else "video"
        raise RunContractError(
            f"training row {i} has an '{column}' column but model.name '{cfg.model.name}' is a text-only policy: "
            "use a vision-language model (a Qwen2-VL folder, or tiny-qwen2vl) or drop the column"
        )
    problem = run_family(cfg).data_problem(cfg, rows, needed_inputs(cfg))
    if problem is None and cfg.data.curriculum:  # e.g. pass-rate bounds over rows that carry no pass rate
        from grpokit.registries import get_registry

        curriculum = get_registry("curriculum").get(cfg.data.curriculum)(**cfg.data.curriculum_options)
        problem = curriculum.data_problem(rows, set(cfg.data.curriculum_options))
    if problem is not None:
        raise RunContractError(problem)
    named = sorted({row["environment"] for row in rows if row.get("environment")})
    if named and not cfg.environment.name:
        raise RunContractError(
            f"the training rows name environment '{named[0]}' (their 'environment' column) but environment.name is null, "
            f"so they would train as single-turn completions: set environment.name={named[0]}"
        )
    if "domains" in needed_inputs(cfg) and rows and any(row.get("domain") is None for row in rows):
        missing = sum(row.get("domain") is None for row in rows)
        raise RunContractError(
            f"algorithm.advantage '{cfg.algorithm.advantage}' needs input 'domains', which this run does not produce: "
            f"{missing} of {len(rows)} training rows have no 'domain' column (add one, e.g. a domain per task)"
        )


def check_tokenizer(cfg: Config, tokenizer) -> None:
    """Refuse, in one line, a plan delimiter the policy's tokenizer cannot write (it would never occur in samples).

    Whether it does occur is known only once completions exist: the span stage refuses a
    delimiter found in none of step 1's completions, before the first update.
    """
    delimiter = cfg.algorithm.plan_delimiter
    if delimiter and "plan_mask" in needed_inputs(cfg):
        written = tokenizer.decode(tokenizer(f"x {delimiter} y", add_special_tokens=False).input_ids)
        if delimiter not in written:
            raise RunContractError(
                f"algorithm.plan_delimiter {delimiter!r} cannot be written by the policy's tokenizer "
                f"(it encodes and decodes as {written!r}): choose text the model can produce"
            )


def needed_inputs(cfg: Config) -> set[str]:
    """Every input the run's methods declare (what the producers must fill)."""
    from grpokit.registries import get_registry

    specs = [get_registry(axis).spec(name) for axis, name, _, _ in chosen_methods(cfg)]
    return {i for spec in specs for i in spec.inputs + spec.optional}
