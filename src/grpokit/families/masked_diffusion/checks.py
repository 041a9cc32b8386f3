"""Which ``model.name`` is a masked-diffusion LM, and the load-time checks of such a run (one line, the field and the fix)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from grpokit.config.schema import Config

EMBEDDED_MDM = {"tiny-mdm": "grpokit's tiny masked-diffusion LM (BertForMaskedLM, 0.2 M params, noisy-prior pretrained here)"}
# What a policy whose units are one sequence split over positions (unit_kind 'sequence') can be trained with.
SEQUENCE_RATIOS = ("sequence",)
SEQUENCE_KL = ("seq_k2", "none")


def _folder(name: str) -> Optional[Path]:
    from grpokit.families.masked_diffusion.model import is_mdm_folder
    from grpokit.trainer.checkpoint import family_folder

    return family_folder(name, is_mdm_folder)


def is_mdm_model(name: str) -> bool:
    """True for ``tiny-mdm`` or a folder (or grpokit run folder) holding a masked-diffusion LM (``mdm_vocab.json``)."""
    return name in EMBEDDED_MDM or _folder(name) is not None


def resolve(name: str) -> Path:
    """The folder to load: the embedded model's cache (built on first use), else the folder or run checkpoint."""
    if name in EMBEDDED_MDM:
        from grpokit.families.masked_diffusion.pretrain import ensure_tiny_mdm

        return ensure_tiny_mdm()
    folder = _folder(name)
    if folder is None:
        raise ValueError(f"model.name '{name}' is not a masked-diffusion model folder (config.json + mdm_vocab.json)")
    return folder


def palette_run(cfg: Config) -> bool:
    from grpokit.families.palette.policy import is_palette_model

    return is_palette_model(cfg.model.name)


def _unsupported(cfg: Config) -> list[tuple[bool, str, str]]:
    from grpokit.families.masked_diffusion.likelihoods import LIKELIHOODS

    surrogate = LIKELIHOODS.spec(cfg.diffusion.likelihood).surrogate
    return [
        (cfg.stage != "grpo", f"stage={cfg.stage}", "the masked-diffusion LM's supervised stage is LLaDA's SFT loss in "
         "`python -m grpokit.families.masked_diffusion.pretrain`; set stage=grpo"),
        (cfg.rollout.backend != "hf", f"rollout.backend={cfg.rollout.backend}", "set rollout.backend=hf"),
        (bool(cfg.environment.name), "environment.name", "multi-turn episodes are text-LM only: set environment.name=null"),
        (cfg.train.sequence_chunk > 0, "train.sequence_chunk", "StreamBP is causal-LM only: set train.sequence_chunk=0"),
        (cfg.distributed.rollout_workers > 0, "distributed.rollout_workers", "set distributed.rollout_workers=0"),
        (bool(cfg.model.teacher), "model.teacher", "the masked-diffusion policy has no teacher role: set model.teacher=null"),
        (cfg.model.lora.enabled, "model.lora.enabled", "the tiny mask predictor is fully fine-tuned: set model.lora.enabled=false"),
        (cfg.algorithm.dynamic_sampling, "algorithm.dynamic_sampling", "set algorithm.dynamic_sampling=false"),
        (bool(cfg.algorithm.plan_delimiter), "algorithm.plan_delimiter", "set algorithm.plan_delimiter=null"),
        (cfg.data.system_prompt is not None, "data.system_prompt", "the model has no chat template: set data.system_prompt=null"),
        (cfg.verification.enabled or cfg.variational.enabled, "verification / variational", "both are text-LM stages: disable them"),
        (surrogate and cfg.algorithm.correction not in ("auto", "none"), f"algorithm.correction={cfg.algorithm.correction}",
         f"diffusion.likelihood '{cfg.diffusion.likelihood}' is a surrogate with no behaviour log-probs to correct against: "
         "set algorithm.correction=auto"),
    ]


def mdm_problem(cfg: Config) -> Optional[str]:
    """Why a masked-diffusion run cannot be set up as configured (or a method needs a unit it lacks), or None."""
    a = cfg.algorithm
    for bad, field, fix in _unsupported(cfg):
        if bad:
            return f"{field} is not supported with the masked-diffusion policy '{cfg.model.name}': {fix}"
    from grpokit.families.masked_diffusion.likelihoods import LIKELIHOODS
    from grpokit.families.masked_diffusion.sampler import SamplerOptions

    d = cfg.diffusion
    if palette_run(cfg):
        from grpokit.families.palette.cogrpo import KNOBS

        bad = sorted(set(d.schedule_knobs) - set(KNOBS))
        if bad:
            return f"diffusion.schedule_knobs {bad}: choose from {', '.join(KNOBS)}"
        if d.steps > 32:
            return f"diffusion.steps {d.steps}: Co-GRPO's 2K units must fit the 64 image tokens; use at most 32 steps"
        if d.likelihood != "mask_grpo_step":
            return (f"diffusion.likelihood '{d.likelihood}': the image-token model's units are Mask-GRPO step transitions "
                    "(plus the schedule's actions); set diffusion.likelihood=mask_grpo_step")
        try:  # the palette policy reads no likelihood options (mask_grpo_step takes none): refuse any
            LIKELIHOODS.check_options(d.likelihood, d.likelihood_options, "diffusion.likelihood_options")
        except ValueError as exc:
            return str(exc)
        if a.beta > 0 and a.kl == "seq_k2":
            return "algorithm.kl 'seq_k2' needs sequence units; Co-GRPO's units are steps: use k3"
        return None
    spec = LIKELIHOODS.spec(d.likelihood)
    try:
        LIKELIHOODS.check_options(d.likelihood, d.likelihood_options, "diffusion.likelihood_options")
        for length, where in ((cfg.rollout.max_new_tokens, "rollout"), (cfg.eval.max_new_tokens, "eval")):
            try:  # the canvas of rollouts and of held-out evaluation: both must fit the step / block settings
                SamplerOptions(d.steps, d.block_length, cfg.rollout.temperature, d.remasking).resolved(length)
            except ValueError as exc:
                raise ValueError(f"{exc} ({where}.max_new_tokens = {length})") from None
    except ValueError as exc:
        return str(exc)
    kind = spec.unit_kind
    if kind == "sequence":
        lacks = f"per-token log-probs, which diffusion.likelihood '{d.likelihood}' lacks (unit_kind 'sequence': one ELBO per sequence)"
        if a.ratio not in SEQUENCE_RATIOS:
            return f"algorithm.ratio '{a.ratio}' needs {lacks}: set algorithm.ratio=sequence (ESPO's length-normalised ratio)"
        if a.beta > 0 and a.kl not in SEQUENCE_KL:
            return f"algorithm.kl '{a.kl}' is a token-level KL and needs {lacks}: set algorithm.kl=seq_k2 (ESPO's sequence k2)"
        if a.token_weights != "all":
            return f"algorithm.token_weights '{a.token_weights}' needs {lacks}: set algorithm.token_weights=all"
        if a.aggregation != "seq_mean_token_mean":
            return (f"algorithm.aggregation '{a.aggregation}' would weight sequences by their unit count; a sequence unit "
                    "needs seq_mean_token_mean")
    elif a.beta > 0 and a.kl == "seq_k2":
        return (f"algorithm.kl 'seq_k2' needs units that split one sequence log-likelihood (unit_kind 'sequence'); "
                f"diffusion.likelihood '{d.likelihood}' has unit_kind '{kind}': use k3 or diffusion.likelihood=espo_elbo")
    return None
