"""`grpokit train --preset X` on the real embedded model, one step each (slow).

Beyond a finite loss, every preset must prove its mechanism acted on the real model with a value
that would differ without it: ``MECHANISM`` checks one run's own metrics (a span found, forking
tokens selected, a teacher that differs from the student, a format gate that zeroed rewards);
``CONTRAST`` runs the same preset, seed and data a second time with one setting that turns the
defining mechanism off and asserts that the metric proving it differs between the two runs.
Where one step cannot show it, ``EXTRA`` gives the preset the steps or updates it needs (both
runs) and the assertions read the last step.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from grpokit.cli import main
from grpokit.config import load_config, preset_names
from grpokit.config.loading import raw_config

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
UNSET = "unset "  # an off-setting "unset a.b" removes the preset's a.b (an option bag of the variant it replaces)


def train_reward_models_the_preset_needs(preset):
    """Presets that score with a trained reward model get one, trained here on synthetic labels."""
    from grpokit.rewards.reward_model import train_regression_rm
    from grpokit.rm_cli import make_synthetic_rm_data

    from grpokit.rewards.rm_builtin import BUILT_RMS

    for r in load_config(preset=preset).rewards:
        if "model_path" in r.kwargs and r.kwargs["model_path"] not in BUILT_RMS:  # a built-in one builds on first use
            rows = make_synthetic_rm_data(120, seed=0)
            train_regression_rm(rows, "response", ["politeness", "safety", "actionability"], r.kwargs["model_path"],
                                freeze_backbone=True, epochs=20, max_length=32)


def nan_to_0(v):
    """A reward column with no applicable row logs a NaN mean; the fixed combiner counts it as 0."""
    return 0.0 if v != v else v


CRPO_WEIGHTS = {"accuracy": 10.0, "format": 1.0, "language": 0.5, "faithfulness": 1.0, "comprehensiveness": 1.0}
ETCON_WEIGHTS = {"format": 0.05, "correctness": 0.7, "cleanliness": 0.15, "consistency": 0.1}  # the ungated sum
MECHANISM = {
    # humanline's offline setting: one generation feeds several optimizer updates (4 mini-batches; a tied group's is of size 0)
    "humanline": [("learn/updates", lambda v: v > 1)],
    # DisCO's authors' structure: 4 mini-batch updates per generation, so its KL constraint has moved weights to measure
    "disco": [("learn/updates", lambda v: v > 1)],
    # flow-matching images: the SDE steps are the trained units (Flow-GRPO 9 of 10 in order; Pref-GRPO a random 60%)
    "flow_grpo": [("flow/trained_steps", lambda v: v == 9)],
    "pref_grpo_image": [("flow/trained_steps", lambda v: v == 6),
                        ("reward/win_rate/mean", lambda v: abs(v - 0.5) < 1e-4)],  # every comparison hands out one point
    "dpp_grpo_image": [("flow/trained_steps", lambda v: v == 9), ("reward/dpp/std", lambda v: v > 0)],  # diversity differs
    # masked-diffusion LMs: each estimator's own units (ESPO: the ELBO over the whole canvas; d1: tokens through [EOS];
    # Mask-GRPO: the unmasking steps) and, with mu > 1 updates on a batch, a ratio and a KL that moved off 1 and 0
    "espo": [("mdm/units_per_sample", lambda v: v == 8), ("ratio/mean", lambda v: v != 1.0), ("kl", lambda v: v > 0)],
    "diffu_grpo": [("mdm/units_per_sample", lambda v: 0 < v <= 8), ("ratio/mean", lambda v: v != 1.0), ("kl", lambda v: v > 0)],
    "mask_grpo": [("mdm/units_per_sample", lambda v: v == 8), ("ratio/mean", lambda v: abs(v - 1.0) < 1e-6)],  # K = 8, on-policy
    "co_grpo": [("schedule/moved", lambda v: v > 0)],  # the schedule policy phi took a gradient step with the predictor
    # dynamic sampling: every kept group is informative (0 < #correct < G); which groups are kept is shown by the
    # unit tests, one step on the real model rarely samples an uninformative one
    "dapo": [("dynamic_sampling/kept_groups", lambda v, m: v == m["dynamic_sampling/informative_groups"] > 0),
             ("overlong/penalised_frac", lambda v: v > 0)],  # completions past 16 - 8 tokens were penalised
    "intellect2": [("dynamic_sampling/kept_groups", lambda v, m: v == m["dynamic_sampling/informative_groups"] > 0)],
    "spine": [("tokens/selected_frac", lambda v: 0 < v < 1),  # only the top-rho entropy (forking) tokens
              ("band/penalty", lambda v: v > 0)],  # some selected tokens lie outside the entropy band
    "ts_grpo": [("spans/plan_frac", lambda v: v > 0)],  # a planning span was found in the sampled text
    "grpo_verif": [("verif/token_frac", lambda v: v > 0)],  # verification tokens are in the loss
    "drpo": [("drpo/k_mean", lambda v: v >= 1)],  # difficulty clusters were formed per domain
    # step 2: rho = log pi_theta / pi_prev against the policy one update behind has moved (step 1 has no earlier update)
    "reg_grpo": [("reg/rho_std", lambda v: v > 0)],
    "deepvideo_r1": [("reg/rho_std", lambda v: v > 0), ("curriculum/hint_refused", lambda v: v == 0),
                     ("vision/video_tokens", lambda v: v > 0)],  # the clips reached the model as video tokens
    "crpo": [("combiner/w0", lambda v: v == 10.0),  # the fixed weighted sum 10 r_acc + r_fmt + 0.5 r_lang + r_faith + r_comp
             ("reward/mean", lambda v, m: abs(v - sum(w * nan_to_0(m[f"reward/crpo_{k}/mean"]) for k, w in CRPO_WEIGHTS.items())) < 1e-4)],
    # (the advantage clip at 5 cannot bind with G = 8: a z-score within 8 is at most 7 / sqrt(8) = 2.47)
    "pref_grpo": [("reward/win_rate/mean", lambda v: abs(v - 0.5) < 1e-4)],  # every comparison hands out one point
    # EtCon's format gate: a completion without <answer> \boxed{} </answer> scores 0, not the 0.15 its cleanliness
    # alone would give it (the consolidation stage after edits: tests/editing/test_etcon_real_model.py)
    "etcon": [("reward/etcon/mean", lambda v, m: v < sum(w * m[f"reward/etcon_{k}/mean"] for k, w in ETCON_WEIGHTS.items()) - 1e-3)],
    "lambda_grpo": [("lambda/weight_mean", lambda v: 0 < v < 1)],  # shared prefixes weigh less than 1
    "variational": [  # posterior traces sampled with the answer in the prompt and trained on with weights rho~ > 0
        ("variational/posterior_rows", lambda v: v == 2 * 4), ("variational/hint_in_prompt", lambda v: v == 1.0),
        ("variational/posterior_trained_frac", lambda v: 0 < v <= 1), ("variational/ess", lambda v: 1 <= v <= 4),
    ],
    "kdrl": [("kd/mask_frac", lambda v: v > 0),  # some responses were incorrect and are distilled
             ("kd/teacher_gap", lambda v: v > 0)],  # the teacher (a demo run trained first) is not the student
    "grpo": [("adv/mean", lambda v: abs(v) < 1e-6)],  # group-relative advantage
    "dr_grpo": [("adv/mean", lambda v: abs(v) < 1e-6)],  # R - mean
    # later mini-batches of a generation: the sequence-level ratio has moved, over several optimizer updates
    "gspo": [("ratio/mean", lambda v: v != 1.0), ("learn/updates", lambda v: v > 1)],
    "dpp_grpo": [("reward/dpp/mean", lambda v: v > 0)],  # marginal log-det gains of distinct completions
    "dpp_rewrite": [("reward/dpp/std", lambda v: v > 0)],  # the rewrites' gains over their R_q differ
    # sampled ```sql blocks name tables / columns of the row's own database schema (the base model's queries never
    # return the gold rows in one step, measured EX 0 of 16: the execution reward's action is left to the unit tests)
    # (clause F1: the FROM/SELECT items they share with the gold query; the judge grades every extracted query above 0)
    "sql": [("reward/sql_format/mean", lambda v: v > 0), ("reward/sql_clause_f1/mean", lambda v: v > 0),
            ("reward/sql_judge/mean", lambda v: v > 0)],
    # Thinkquel in miniature: the plan span (through the ```sql fence) was found and the answer span carried the rest
    "ts_sql": [("spans/plan_frac", lambda v: 0 < v < 1), ("reward/sql_format/mean", lambda v: v > 0)],
    "safe_multilabel": [("reward/rm_score/harmlessness/std", lambda v: v > 0)],  # the multi-label reward model tells completions apart
    "guess_number": [("env/turns", lambda v: v > 1),  # episodes went on after "higher" / "lower"
                     ("env/observation_tokens", lambda v: v > 0)],  # the environment's replies sat between the turns
    "activevln": [("env/budget", lambda v, m: abs(v - 2 * m["env/n_gt"]) < 1e-6)],  # the step budget: 2 x the expert path
    "vision_grpo": [("vision/image_tokens", lambda v: v > 0),  # every prompt carried its image's tokens
                    ("adv/abs_mean", lambda v: v > 0)],  # answers about the images differed within groups
    "papo": [("papo/kl_prcp", lambda v: v > 0)],  # the patch-blackened image changed the answers' log-probs
    "dpo": [("rewards/margins", lambda v: v > 0)],  # after 3 steps the chosen completions beat the rejected ones
    "kto": [("rewards/margins", lambda v: v > 0)],
}
EXTRA = {  # presets whose mechanism needs more than one update to show
    "gspo": ["rollout.prompts_per_step=4"],  # a group for each of its 4 mini-batch updates per generation
    "humanline": ["rollout.prompts_per_step=4"],  # a group for each of its 4 mini-batch updates per generation
    "disco": ["rollout.prompts_per_step=4"],  # a group for each of its 4 mini-batch updates per generation
    "reg_grpo": ["train.steps=2"], "deepvideo_r1": ["train.steps=2"],  # rho against the policy one update behind
    # the masked-diffusion LMs at the canvas they were pretrained on (8), where rewards differ within groups
    # and 8 prompts: the v3 build solves 27% of mdm_sort, and two prompts often both fail every sample (no group varies)
    **{p: ["rollout.max_new_tokens=8", "rollout.prompts_per_step=8"] for p in ("espo", "diffu_grpo", "mask_grpo")},
    "co_grpo": ["rollout.max_new_tokens=64"],  # the 64 image tokens
    "papo": ["data.task_options={kinds: [colour]}"],  # the questions the noisy prior answers by looking
    # two-digit products: the majority answer is often wrong, so the majority-vote reward is not the accuracy
    "ttrl": ['data.task_options={operators: ["*"], digits: 2, nonnegative: true}'],
    "grpo": ["train.steps=2"],  # the KL to the reference is 0 until the policy has moved
    "sql": ["rollout.max_new_tokens=96"],  # room for a ```sql block
    # room for the plan and a closed ```sql block (measured at step 1 with 160: format 0.25, plan_frac 0.15 of 16 samples)
    "ts_sql": ["rollout.max_new_tokens=160", "algorithm.num_iterations=2"],
    # supervised presets: the third step's loss after two updates, against the same batch untrained
    "sft": ["train.steps=3"], "activevln_sft": ["train.steps=3"], "tool_use_sft": ["train.steps=3"],
    "dpp_rewrite_sft": ["train.steps=3"],
    # the CoT traces are ~200 tokens after a schema prompt: 2 batches of 2 keep two runs of it to minutes
    "sql_cot_sft": ["train.steps=2", "offline.batch_size=2", "train.micro_batch_size=2"],
    "dpo": ["train.steps=3"], "kto": ["train.steps=3"], "crpo_sft": ["train.steps=3"],
    # span-aware ratios differ from token ratios only off-policy: a second update on the batch
    "ts_grpo": ["algorithm.num_iterations=2"],
}


def train_the_stage_the_preset_starts_from(preset):
    """A preset whose model is a run another preset writes (ActiveVLN's GRPO starts from its imitation run): 3 steps of that one."""
    name = load_config(preset=preset).model.name
    writers = [p for p in preset_names() if load_config(preset=p).logging.output_dir == name]
    if writers:
        sets = [f"logging.output_dir={name}", "train.steps=3", "data.n_train=8", "data.n_heldout=2", "eval.before=false",
                "eval.after=false", "logging.progress=false", *EXTRA.get(writers[0], [])]
        assert main(["train", "--preset", writers[0], *[arg for s in sets for arg in ("--set", s)]]) == 0


def train_the_teacher_the_preset_needs(preset):
    """KDRL's teacher is a run grpokit trained first (``runs/demo``, relative to the test's folder): 2 demo steps."""
    teacher = load_config(preset=preset).model.teacher
    if teacher:
        assert main(["train", "--preset", "demo", "--set", f"logging.output_dir={teacher}", "--set", "train.steps=2",
                     "--set", "rollout.max_new_tokens=16", "--set", "eval.before=false", "--set", "eval.after=false",
                     "--set", "logging.progress=false"]) == 0


def run_one_step(preset: str, tmp_path: Path, extra_sets: tuple[str, ...] = (), name: str = "run") -> dict:
    """Train ``preset`` for one step (``EXTRA`` steps where given) on the real model; the last step's metrics.

    Every call with the same ``preset`` and ``extra_sets`` samples the same prompts with the same
    seed, so two calls that differ in one ``--set`` differ only by what that setting does.
    """
    cfg = load_config(preset=preset)
    data = cfg.data.path if cfg.stage != "grpo" else None  # offline presets (sft, dpo, kto) read the repository's example data
    sets = [
        *([f"data.path={REPO / data}"] if data else []),
        f"logging.output_dir={tmp_path / name}", "train.steps=1", "rollout.prompts_per_step=2", "rollout.max_new_tokens=16",
        "eval.before=false", "eval.after=false", "logging.progress=false", *EXTRA.get(preset, []),
        *[s for s in extra_sets if not s.startswith(UNSET)],
    ]
    source = ["--preset", preset]
    unset = [s[len(UNSET):] for s in extra_sets if s.startswith(UNSET)]
    if unset:  # --set merges into an option bag and cannot empty it: the preset, without the bag, as a config file
        raw = raw_config(preset=preset)
        for dotted in unset:
            *parents, key = dotted.split(".")
            section = raw
            for part in parents:
                section = section[part]
            del section[key]
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw))
        source = [str(tmp_path / f"{name}.yaml")]
    assert main(["train", *source, *[arg for s in sets for arg in ("--set", s)]]) == 0
    shutil.rmtree(tmp_path / name / "checkpoints", ignore_errors=True)  # ~1.6 GB a run (weights + optimiser state)
    return json.loads((tmp_path / name / "metrics.jsonl").read_text().splitlines()[-1])


def differs(on, off):
    """The mechanism changed the value, or its metric is absent without it (relative 1e-4: two runs of one setting
    agree to the last bit on one machine, a mechanism that acted moves the value far more)."""
    return off is None or abs(on - off) > 1e-4 * max(1.0, abs(on), abs(off))


def lower(on, off):
    return off is not None and on < off - 1e-4 * max(1.0, abs(off))


def higher(on, off):
    return off is not None and on > off + 1e-4 * max(1.0, abs(off))


def positive_where_off_has_none(on, off):
    return on > 0 and (off is None or off == 0)


# preset -> (the --set turning its defining mechanism off, [(metric, how the run with the mechanism must compare
# with the run without it)]). Same preset, seed and data both times: only the one mechanism differs.
CONTRAST = {
    # the soft overlong punishment lowers the reward of completions in the last 8 of the 16 tokens
    "dapo": (["algorithm.overlong_cache=0"], [("reward/mean", lower)]),
    # the entropy bonus -1e-3 H enters the loss (the two-sided clip at 4 never binds in 2 updates on the real model)
    "intellect2": (["algorithm.entropy_coef=0"], [("loss", differs)]),
    # the entropy band penalises selected tokens outside the forks' 10th-50th entropy percentiles
    "spine": (["algorithm.entropy_band_coef=0"], [("loss", differs), ("grad_norm", differs)]),
    # the self-verification tokens enter the loss with weight alpha = 0.2 (one on-policy update: the loss value is
    # -mean(A) ~ 0 either way, the gradient is not)
    "grpo_verif": (["algorithm.loss_options={alpha: 0.0}"], [("grad_norm", differs)]),
    # per-domain difficulty clusters rescale the GRPO advantage
    "drpo": (["algorithm.advantage=grpo", "unset algorithm.advantage_options"], [("adv/abs_mean", differs)]),
    # the regression of the advantage onto the standardised log-ratio against the clipped surrogate (step 2)
    "reg_grpo": (["algorithm.loss=ppo_clip", "unset algorithm.loss_options"], [("loss", differs), ("grad_norm", differs)]),
    # a win rate always averages 0.5; the pointwise judge's mean is the accuracy
    "pref_grpo": (['rewards=[{name: answer_match, weight: 1.0}]'], [("reward/mean", differs)]),
    "pref_grpo_image": (['rewards=[{name: colour_fraction, weight: 1.0}]'], [("adv/abs_mean", differs), ("grad_norm", differs)]),
    # the majority answer as pseudo-label instead of the true answer
    "ttrl": (['rewards=[{name: answer_match, weight: 1.0}]'], [("reward/mean", differs)]),
    # DisCO's score-based DRO objective with its KL constraint instead of the clipped surrogate
    "disco": (["algorithm.loss=ppo_clip", "unset algorithm.loss_options"], [("loss", differs)]),
    # tokens shared by several completions of a group weigh 1 / (how many share the prefix)
    "lambda_grpo": (["algorithm.token_weights=all"], [("grad_norm", differs)]),
    # the reverse-KL to the teacher on the incorrect responses
    "kdrl": (["algorithm.loss_options={kd_estimator: k2, kd_mask: response, beta_0: 0.0, beta_min: 0.0, kappa: 0.0}"],
             [("loss", differs)]),
    # the reference synced to the pre-update weights after every update: from the second update on, the ratio is
    # against the last weights, not the sampler's (the clamp to [-1, 1.5] does not bind this close to the sampler)
    "humanline": (["algorithm.ref_sync_every=0"], [("loss", differs)]),
    # beta * k3 to the reference: 0 at step 1 (policy = reference), > 0 at step 2
    "grpo": (["algorithm.beta=0"], [("kl", positive_where_off_has_none), ("loss", differs)]),
    # R - mean without the division by the group's std
    "dr_grpo": (["algorithm.advantage=grpo", "algorithm.scale=group"], [("adv/abs_mean", differs)]),
    # the sequence-level ratio exp(mean_t log r) clipped at 3e-4 / 4e-4 instead of the token ratios
    "gspo": (["algorithm.ratio=token"], [("loss", differs), ("grad_norm", differs)]),
    # the weights move by the objectives' gradient influence (rho = 1e30: they stay at 1/2)
    "dynamic_weights": (["reward_combiner.options={rho: 1.0e+30, grad_micro_batches: 1}"], [("combiner/w0", differs)]),
    # the flow-matching GRPO update is over the trained SDE steps (5 of 10 instead of 9)
    "flow_grpo": (["flow.train_fraction=0.5"], [("grad_norm", differs)]),
    # supervised steps lower the loss on the last step's batch (lr 1e-12: the same batch on the untrained model)
    "sft": (["optim.lr=1.0e-12"], [("loss", lower)]),
    "activevln_sft": (["optim.lr=1.0e-12"], [("loss", lower)]),
    "tool_use_sft": (["optim.lr=1.0e-12"], [("loss", lower)]),
    # SFT on the clause-level CoT traces: their NLL falls below the base model's on the same batch
    "sql_cot_sft": (["optim.lr=1.0e-12"], [("loss", lower)]),
    # the calculator's results come back as observation tokens between the turns (one turn: never)
    "tool_use": (["environment.max_turns=1"], [("env/observation_tokens", positive_where_off_has_none)]),
    # (activevln has none: after 3 imitation steps every first turn is malformed, env/malformed = 1, so early stopping
    # never acts in one step; measured env/pruned 0 with and without it. Its MECHANISM check is the step budget.)
    # GRPO from the CoT-SFT run's weights: its samples' entropy is not the base model's
    "sql_after_cot": (["model.name=smollm2-135m-instruct"], [("rollout/entropy", differs)]),
    # supervised steps on the worked dose-calculation answers lower their NLL
    "crpo_sft": (["optim.lr=1.0e-12"], [("loss", lower)]),
    # three preference steps: the chosen completions' implicit reward rises above the rejected ones' (lr 1e-12: the
    # policy stays the reference, margins ~0)
    "dpo": (["optim.lr=1.0e-12"], [("rewards/margins", higher)]),
    "kto": (["optim.lr=1.0e-12"], [("rewards/margins", higher)]),
    # CRPO's weighted sum of five verifiable rewards against the accuracy reward alone
    "crpo": (["rewards=[{name: crpo_accuracy, weight: 1.0}]"], [("reward/mean", differs)]),
    # the log-det marginal-gain diversity reward adds to the task reward (its gains are >= 0; the z-scored advantages'
    # mean size hardly moves: measured 0.85789 vs 0.85790)
    "dpp_grpo": (["rewards=[{name: answer_match, weight: 1.0}]"], [("reward/mean", higher)]),
    # the format gate: the same components summed without it score higher (cleanliness alone earns 0.15)
    "etcon": ([f"rewards=[{', '.join(f'{{name: etcon_{k}, weight: {w}}}' for k, w in ETCON_WEIGHTS.items())}]"],
              [("reward/mean", lower)]),
    # clause F1 rewards the FROM / SELECT items shared with the gold query (execution accuracy is 0 in one step)
    "sql": (["rewards=[{name: sql_execution, weight: 1.0, kwargs: {timeout_s: 1.0, max_rows: 1000}}, "
             "{name: sql_string_match, weight: 0.1}, {name: sql_judge, weight: 0.2}, {name: sql_format, weight: 0.1}]"],
            [("reward/mean", higher)]),
    # the multi-label reward model's three aspects against the rule judge alone
    "safe_multilabel": (["rewards=[{name: safety_rule, weight: 1.0}]"], [("reward/mean", differs)]),
    # "higher" / "lower" come back between turns (one turn, one guess: never)
    "guess_number": (["environment.max_turns=1", "environment.options={max_guesses: 1}"],
                     [("env/observation_tokens", positive_where_off_has_none), ("env/turns", differs)]),
    # token ratios on the plan, the GSPO sequence ratio (clip 3e-4 / 4e-4) on the answer, against GRPO's token ratios
    # everywhere: the second update's clipping differs
    "ts_grpo": (["algorithm.loss=ppo_clip", "algorithm.ratio=token", "unset algorithm.plan_delimiter",
                 "unset algorithm.loss_options"], [("loss", differs), ("grad_norm", differs)]),
    "ts_sql": (["algorithm.loss=ppo_clip", "algorithm.ratio=token", "unset algorithm.plan_delimiter",
                "unset algorithm.loss_options"], [("loss", differs), ("grad_norm", differs)]),
    # the posterior's traces, IWAE-weighted, against GRPO on the policy's own samples
    "variational": (["variational.enabled=false"], [("loss", differs), ("grad_norm", differs)]),
    # the schedule policy phi samples the step's knobs and takes a gradient step (std 0: MaskGIT's fixed schedule)
    "co_grpo": (["diffusion.schedule_std=0"], [("schedule/moved", positive_where_off_has_none)]),
    # masked-diffusion likelihoods, each against another estimator of the same samples: ESPO's sequence ELBO (ratio
    # exp((ELBO - ELBO_old) / L)) against d1's one-step token stand-in, and the reverse; Mask-GRPO's replayed unmasking
    # steps against the stand-in
    "espo": (["diffusion.likelihood=stand_in", "unset diffusion.likelihood_options", "algorithm.ratio=token", "algorithm.kl=k3"],
             [("loss", differs), ("grad_norm", differs)]),
    "diffu_grpo": (["diffusion.likelihood=espo_elbo", "unset diffusion.likelihood_options", "algorithm.ratio=sequence",
                    "algorithm.aggregation=seq_mean_token_mean",
                    "algorithm.kl=seq_k2"], [("loss", differs), ("grad_norm", differs)]),
    "mask_grpo": (["diffusion.likelihood=stand_in"], [("grad_norm", differs)]),
    # DPP-GRPO's paper setting: each rewrite's gain over its query's curated R_q, against the leave-one-out group
    "dpp_rewrite": (["rewards=[{name: dpp, weight: 1.0, kwargs: {reference: group, embed: minilm, lambda_div: 0.5, lambda_rel: 0.5}}]"],
                    [("reward/mean", differs)]),
    "dpp_rewrite_sft": (["optim.lr=1.0e-12"], [("loss", lower)]),  # SFT on the rewrite demonstrations lowers their NLL
    # PAPO's perception KL (maximised) and entropy penalty against the plain clipped surrogate on the same samples
    "papo": (["algorithm.loss=ppo_clip", "unset algorithm.loss_options"], [("loss", differs), ("grad_norm", differs)]),
    # Reg-GRPO's regression of the advantage onto the log-ratio against the clipped surrogate
    "deepvideo_r1": (["algorithm.loss=ppo_clip", "unset algorithm.loss_options"], [("loss", differs), ("grad_norm", differs)]),
    # GRPO's group standardisation of the answers about the images (scale none: R - mean, no division by the std)
    "vision_grpo": (["algorithm.scale=none"], [("adv/abs_mean", differs)]),
    # the DPP diversity of the group's images on top of the colour reward
    "dpp_grpo_image": (["rewards=[{name: colour_fraction, weight: 1.0}]"], [("reward/mean", differs)]),
    # (activevln: see above)
}


@pytest.mark.parametrize("preset", [p for p in preset_names() if p != "demo"])
def test_preset_runs_on_real_model(preset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths of a preset (reward models, runs/) land here
    train_reward_models_the_preset_needs(preset)
    train_the_teacher_the_preset_needs(preset)
    train_the_stage_the_preset_starts_from(preset)
    m = run_one_step(preset, tmp_path)
    assert m["loss"] == m["loss"]  # not NaN
    for key, holds in MECHANISM.get(preset, []):
        assert key in m, (preset, key)
        args = (m[key], m) if holds.__code__.co_argcount == 2 else (m[key],)  # a check may read the step's other metrics
        assert holds(*args), (preset, key, m[key])
    if preset in CONTRAST:
        off_sets, checks = CONTRAST[preset]
        off = run_one_step(preset, tmp_path, tuple(off_sets), name="off")
        for key, relation in checks:
            assert key in m, (preset, key)
            assert relation(m[key], off.get(key)), (preset, key, "with", m[key], "without", off.get(key), off_sets)


def test_every_preset_has_a_mechanism_check():
    """A new preset must say how its one real-model step proves its method acted."""
    assert [p for p in preset_names() if p != "demo" and p not in MECHANISM and p not in CONTRAST] == []
