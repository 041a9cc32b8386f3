"""Every option of every reward combiner, curriculum and masked-diffusion likelihood changes its output, or is refused at load.

The companion of ``test_option_effects.py`` (losses, advantages, token weightings, corrections)
for three more axes. For each registered name, each option key it takes needs an entry below:
an alternative value (with the other options it needs to act) under which the function's
output on small fixed inputs differs from the default's — a combiner's rewards over three
steps, a curriculum's drawn and augmented prompts over two steps, a likelihood's per-unit
log-probs on a tiny random mask predictor — or the reason it is refused at load, with a test of
that refusal. A newly registered variant or option without an entry fails here.
"""

import random

import pytest
import torch

from grpokit.config.loading import load_config
from grpokit.config.methods import method_problem
from grpokit.data.curricula import CURRICULA
from grpokit.families.masked_diffusion.likelihoods import LIKELIHOODS, CanvasInputs
from grpokit.registry import call_with
from grpokit.rewards.combiners import COMBINERS

# ----------------------------------------------------------------------------- reward combiners

# option -> alternative value, or (alternative value, other options that make it act)
COMBINER_ALTERNATIVES = {
    "normalize_sum": {"std_mode": "population", "std_eps": 0.5},
    "hypervolume": {"maximize": [True, False], "normalize": True, "std_mode": ("population", {"normalize": True}),
                    "std_eps": (0.5, {"normalize": True})},
    "mirror_descent": {"rho": 1e-7, "accumulation_steps": 2, "normalize": True,
                       "std_mode": ("population", {"normalize": True}), "std_eps": (0.5, {"normalize": True})},
}
# options read only under another option's value: refused at load otherwise (reads_if in the registration)
COMBINER_SWITCHED_OFF = {
    ("hypervolume", "std_mode"): ("population", "normalize"),
    ("hypervolume", "std_eps"): (0.5, "normalize"),
    ("mirror_descent", "std_mode"): ("population", "normalize"),
    ("mirror_descent", "std_eps"): (0.5, "normalize"),
}

NAN = float("nan")
SCORES = torch.tensor([[1.0, 0.2], [0.0, 0.9], [1.0, NAN], [0.5, 0.4],  # [B=8, K=2]: two groups of 4,
                       [0.0, 0.1], [1.0, 0.7], [0.0, 0.3], [1.0, 1.0]])  # one objective missing in row 2
GROUP_IDS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
VALIDATIONS = [[0.2, 0.5], [0.4, 0.3], [0.5, 0.6]]  # the initial model's, after step 1, after step 2


def _combined(name: str, options: dict) -> torch.Tensor:
    """``[3 * 8]`` the rewards of three steps, the state carried as the trainer carries it."""
    g = torch.Generator().manual_seed(4)
    grads = torch.randn(3, 2, 16, generator=g)  # [steps, K, P] per-objective policy gradients
    spec, state, out = COMBINERS.spec(name), None, []
    for step in range(3):
        context = {"weights": torch.tensor([1.0, 0.5]), "state": state, "validation": VALIDATIONS[step],
                   "objective_grads": grads[step], "lr": 1e-6}
        reward, state, _ = call_with(spec.fn, SCORES, GROUP_IDS, context=context, options=options)
        out.append(reward)
    return torch.cat(out)


def _cases(registry) -> list:
    return [(name, key) for name in registry.names() for key in registry.option_names(name)]


@pytest.mark.parametrize("name, option", _cases(COMBINERS))
def test_every_combiner_option_changes_the_rewards(name, option):
    assert option in COMBINER_ALTERNATIVES.get(name, {}), f"combiner '{name}' option '{option}': add an alternative value that acts"
    entry = COMBINER_ALTERNATIVES[name][option]
    value, base = entry if isinstance(entry, tuple) else (entry, {})
    default, changed = _combined(name, dict(base)), _combined(name, {**base, option: value})
    assert (changed - default).abs().max() > 1e-6, f"{name}.{option} = {value!r} did not change the rewards"


@pytest.mark.parametrize("name, option", sorted(COMBINER_SWITCHED_OFF))
def test_a_combiner_option_that_cannot_act_is_refused_at_load(name, option):
    value, switch = COMBINER_SWITCHED_OFF[(name, option)]
    assert torch.equal(_combined(name, {option: value}), _combined(name, {}))  # raw scores: no group std to change
    msg = method_problem(load_config(preset="demo", overrides=[
        f"reward_combiner.name={name}", "algorithm.advantage=dr_grpo", f"reward_combiner.options={{{option}: {value}}}"]))
    assert msg == (f"reward_combiner.options.{option} is read by reward_combiner.name '{name}' only when {switch} is "
                   f"one of [True] (it is 'its default'): remove it or set reward_combiner.options.{switch}")
    assert method_problem(load_config(preset="demo", overrides=[
        f"reward_combiner.name={name}", "algorithm.advantage=dr_grpo", f"reward_combiner.options={{{option}: {value}, {switch}: true}}"])) is None


def test_mirror_descent_influence_is_no_config_option():
    """It was silently ignored: the trainer always passes objective_grads, whose influence replaces it."""
    grads = torch.randn(2, 16, generator=torch.Generator().manual_seed(5))
    context = {"weights": torch.tensor([1.0, 0.5]), "objective_grads": grads, "lr": 1e-6}
    fn = COMBINERS.get("mirror_descent")
    with_option = call_with(fn, SCORES, GROUP_IDS, context=context, options={"influence": [1e3, -1e3]})[0]
    assert torch.equal(with_option, call_with(fn, SCORES, GROUP_IDS, context=context)[0])
    assert "influence" not in COMBINERS.option_names("mirror_descent")
    from grpokit.trainer.inputs import RunContractError, check_run

    with pytest.raises(RunContractError) as exc:  # at load
        check_run(load_config(preset="demo", overrides=["reward_combiner.name=mirror_descent",
                                                        "reward_combiner.options={influence: [1.0, 0.0]}"]))
    assert str(exc.value) == ("reward_combiner.options ['influence'] is not an option of combiner 'mirror_descent'; valid keys: "
                              "accumulation_steps, normalize, rho, std_eps, std_mode")


# ----------------------------------------------------------------------------- masked-diffusion likelihoods

LIKELIHOOD_ALTERNATIVES = {
    "stand_in": {"prompt_mask_prob": 0.6},
    "espo_elbo": {"num_mc": 3, "coupled": False},
}


def _likelihood(name: str, options: dict) -> torch.Tensor:
    """``[2, 6]`` per-unit log-probs of two canvases under a tiny random mask predictor (seeded)."""
    from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, mdm_logits
    from grpokit.families.masked_diffusion.pretrain import encode_rows

    tok = MDMTokenizer()
    model = build_mdm(len(tok), hidden=32, layers=1, heads=2, seed=0).eval()
    p_ids, p_mask, _ = encode_rows(tok, ["rev 1234", "rev 56"], None, 0)
    canvas = torch.tensor([tok.encode("4321") + [tok.eos_id] * 2, tok.encode("65") + [tok.eos_id] * 4])
    commit = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 0, 3, 2, 5, 4]])  # the sampler's record: one position a step
    inp = CanvasInputs(p_ids, p_mask, canvas, commit, torch.tensor([3, 8]), steps=6)
    with torch.no_grad():
        logp, _ = call_with(LIKELIHOODS.get(name), lambda ids, att: mdm_logits(model, ids, att), inp,
                            context={"mask_id": tok.mask_id, "eos_id": tok.eos_id, "temperature": 1.0}, options=options)
    return logp


@pytest.mark.parametrize("name, option", _cases(LIKELIHOODS))
def test_every_likelihood_option_changes_the_log_likelihood(name, option):
    assert option in LIKELIHOOD_ALTERNATIVES.get(name, {}), f"likelihood '{name}' option '{option}': add an alternative value that acts"
    value = LIKELIHOOD_ALTERNATIVES[name][option]
    default, changed = _likelihood(name, {}), _likelihood(name, {option: value})
    assert (changed - default).abs().max() > 1e-6, f"{name}.{option} = {value!r} did not change the log-likelihood"


def test_every_likelihood_runs_on_the_fixture():  # so the table above is not vacuous for an optionless one
    for name in LIKELIHOODS.names():
        assert torch.isfinite(_likelihood(name, {})).all()


def test_likelihood_options_of_a_palette_run_are_refused():
    """They were read by nothing: the Co-GRPO palette policy computes Mask-GRPO step log-probs without options."""
    from grpokit.families.masked_diffusion.checks import mdm_problem

    cfg = load_config(preset="co_grpo", overrides=["diffusion.likelihood_options={num_mc: 2}"])
    assert mdm_problem(cfg) == ("diffusion.likelihood_options ['num_mc'] is not an option of likelihood 'mask_grpo_step'; "
                                "valid keys: none")
    assert mdm_problem(load_config(preset="co_grpo")) is None


# ----------------------------------------------------------------------------- curricula


class Hook(str):
    """A hook written in the config as 'path/file.py:function': the test writes HOOKS to a file and names one."""


HOOKS = '''def shout_hint(row, fraction, rng):
    return "Hint: think " + "very " * round(4 * fraction) + "carefully."


def upper_perturber(row, strength, rng):
    return {**row, "prompt": row["prompt"].upper()}
'''
CURRICULUM_ALTERNATIVES = {
    "difficulty_augmentation": {
        "window": 1, "r_range": 0.25, "margin": 0.3, "min_buffer": 5, "prompt_ema": 0.5, "measure_augmented": False,
        "hint": "method", "trace_samples": 2, "answer_cue": "Known: {answer}",
        "hint_builder": (Hook("shout_hint"), {"hint": "method"}), "perturber": Hook("upper_perturber"),
    },
    "pass_rate_filter": {"low": 0.01, "high": 0.95, "pass_rates": {"p4": 0.95}, "pass_rate_column": None,
                         "keep_unknown": False, "online": False, "min_observations": 1},
}
# options read only under another option's value: (alternative, the switch, a value that switches it off, the values that read it)
CURRICULUM_SWITCHED_OFF = {
    ("difficulty_augmentation", "trace_samples"): (2, "hint", "method", ["trace"]),
    ("difficulty_augmentation", "answer_cue"): ("Known: {answer}", "hint", "method", ["trace"]),
    ("difficulty_augmentation", "hint_builder"): (Hook("shout_hint"), "hint", "trace", ["method"]),
    ("pass_rate_filter", "min_observations"): (1, "online", False, [True]),
}
NAMES = ["ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal"]


def _traces(rows: list[dict], k: int) -> list[list[tuple[str, float]]]:
    """A stand-in policy: trace i of a row names NAMES[i] and repeats the answer cue; reward i (the last is best)."""
    return [[(f"<think>{NAMES[i]} {r['prompt'].splitlines()[-1]} done</think>", float(i)) for i in range(k)] for r in rows]


def _curriculum_run(name: str, options: dict, folder) -> list:
    """The rows two steps draw: difficulty_augmentation's prompts, pass_rate_filter's keep decisions."""
    resolved = {k: f"{folder / 'hooks.py'}:{v}" if isinstance(v, Hook) else v for k, v in options.items()}
    (folder / "hooks.py").write_text(HOOKS)
    cur = CURRICULA.get(name)(**resolved)
    if name == "pass_rate_filter":
        rows = [{"prompt": "p1", "pass_rate": 0.05}, {"prompt": "p2", "pass_rate": 0.5}, {"prompt": "p3", "pass_rate": 0.9},
                {"prompt": "p4"}]
        kept = [cur.keep(r) for r in rows]
        for acc in ([1.0, 0.0], [1.0, 0.5]):  # p2 solved twice, p4 once of two
            cur.observe([rows[1], rows[3]], acc)
            kept += [cur.keep(r) for r in rows]
        return kept
    cur.bind_policy(_traces)
    rows = [{"prompt": p, "answer": a} for p, a in
            (("What is 3 + 4?", "7"), ("What is 12 + 25?", "37"), ("What is 6 * 7?", "42"), ("What is 8 - 5?", "3"))]
    # step 1: buffer mean 0.5625, dR = +0.5625 / -0.4375 / +0.0625 / -0.1875 (hint, perturb, hint, perturb)
    cur.observe(rows, [0.0, 1.0, 0.5, 0.75])
    first = cur.transform(rows, random.Random(0))
    cur.observe(first, [1.0, 0.25, 0.5, 0.5])  # the augmented rows' groups, credited to their source prompts
    return [r["prompt"] for r in first + cur.transform(rows, random.Random(1))]


@pytest.mark.parametrize("name, option", _cases(CURRICULA))
def test_every_curriculum_option_changes_the_drawn_rows(name, option, tmp_path):
    assert option in CURRICULUM_ALTERNATIVES.get(name, {}), f"curriculum '{name}' option '{option}': add an alternative value that acts"
    entry = CURRICULUM_ALTERNATIVES[name][option]
    value, base = entry if isinstance(entry, tuple) else (entry, {})
    default, changed = _curriculum_run(name, dict(base), tmp_path), _curriculum_run(name, {**base, option: value}, tmp_path)
    assert changed != default, f"{name}.{option} = {value!r} did not change the drawn rows"


def _data_problem(name: str, options: str):
    return method_problem(load_config(preset="demo", overrides=[f"data.curriculum={name}", f"data.curriculum_options={options}"]))


@pytest.mark.parametrize("name, option", sorted(CURRICULUM_SWITCHED_OFF))
def test_a_curriculum_option_that_cannot_act_is_refused_at_load(name, option, tmp_path):
    value, switch, off, on = CURRICULUM_SWITCHED_OFF[(name, option)]
    if option != "hint_builder":  # (a hint_builder with hint=trace also fails when built: it never reached the hints)
        assert _curriculum_run(name, {switch: off, option: value}, tmp_path) == _curriculum_run(name, {switch: off}, tmp_path)
    shown = f"{tmp_path / 'hooks.py'}:{value}" if isinstance(value, Hook) else value
    msg = _data_problem(name, f"{{{switch}: {str(off).lower()}, {option}: '{shown}'}}")
    assert msg == (f"data.curriculum_options.{option} is read by data.curriculum '{name}' only when {switch} is one of "
                   f"{on} (it is {off!r}): remove it or set data.curriculum_options.{switch}")


def test_curriculum_options_the_constructor_refuses_are_refused_at_load(tmp_path):
    # min_buffer above window: the buffer never holds min_buffer samples, so nothing was ever augmented (silently)
    assert _data_problem("difficulty_augmentation", "{window: 4, min_buffer: 5}") == (
        "data.curriculum_options: curriculum 'difficulty_augmentation': min_buffer 5 exceeds window 4, so no row would "
        "ever be hinted or perturbed: set min_buffer <= window")
    assert _data_problem("difficulty_augmentation", "{window: 5, min_buffer: 5}") is None
    # a hook from a config is a 'module:function' / 'file.py:function' spec (a plain string was called: TypeError mid-run)
    assert _data_problem("difficulty_augmentation", "{hint: method, hint_builder: shout}") == (
        "data.curriculum_options.hint_builder 'shout': expected 'package.module:name' or 'path/to/file.py:name'")
    (tmp_path / "hooks.py").write_text(HOOKS + "NOT_A_FUNCTION = 3\n")
    assert _data_problem("difficulty_augmentation", f"{{perturber: '{tmp_path / 'hooks.py'}:NOT_A_FUNCTION'}}") == (
        f"data.curriculum_options.perturber '{tmp_path / 'hooks.py'}:NOT_A_FUNCTION' is not a function: name a function (row, fraction, rng)")
    assert _data_problem("pass_rate_filter", "{low: 0.9, high: 0.1}").startswith("data.curriculum_options: curriculum 'pass_rate_filter': need 0 <= low")


# ----------------------------------------------------------------------------- the combiners' producer options

REWARDS = '''def first_char(prompts, completions, **_):
    return [(ord(c[0]) % 5) / 5 if c else 0.0 for c in completions]


def last_char(prompts, completions, **_):
    return [(ord(c[-1]) % 3) / 3 if c else 0.0 for c in completions]


def prompt_code(prompts, completions, **_):
    return [sum(map(ord, p)) % 7 / 7 for p in prompts]
'''
# reward_combiner.options keys read by the trainer's producer of a combiner's input: (combiner, alternative, metric)
PRODUCER_ALTERNATIVES = {
    "grad_param_pattern": ("mirror_descent", "layers.0.", "combiner/influence0"),
    "grad_micro_batches": ("mirror_descent", 2, "combiner/influence0"),
    "validation_prompts": ("hypervolume", 2, "combiner/validation1"),  # the prompt-code column: greedy completions of a random model may all be empty
}


def _one_step(combiner: str, options: dict, folder) -> dict:
    from grpokit.testing import tiny_model_and_tokenizer
    from grpokit.trainer.loop import Trainer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rewards.py").write_text(REWARDS)
    second = "last_char" if combiner == "mirror_descent" else "prompt_code"
    shown = ", ".join(f"{k}: {v!r}" for k, v in options.items())
    cfg = load_config(overrides=[
        f"logging.output_dir={folder / 'run'}", "logging.progress=false", "logging.log_samples_every=0", "data.task=arithmetic",
        "data.n_train=8", "data.n_heldout=8", "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6",
        "train.micro_batch_size=4", "eval.before=false", "eval.after=false", "train.steps=1", "algorithm.advantage=dr_grpo",
        f"rewards=[{{name: '{folder / 'rewards.py'}:first_char'}}, {{name: '{folder / 'rewards.py'}:{second}'}}]",
        f"reward_combiner.name={combiner}", f"reward_combiner.options={{{shown}}}"])
    torch.manual_seed(0)
    return Trainer(cfg, *tiny_model_and_tokenizer(seed=0)).train_step()


def test_every_producer_option_of_the_combiners_changes_what_the_combiner_gets(tmp_path):
    from grpokit.trainer.inputs import TRAINER_OPTIONS

    assert sorted(PRODUCER_ALTERNATIVES) == sorted(TRAINER_OPTIONS["combiner"]), "add an alternative value for each producer option"
    defaults = {name: _one_step(name, {}, tmp_path / name) for name in ("mirror_descent", "hypervolume")}
    for option, (combiner, value, metric) in PRODUCER_ALTERNATIVES.items():
        changed = _one_step(combiner, {option: value}, tmp_path / option)
        assert changed[metric] != pytest.approx(defaults[combiner][metric], abs=1e-9), f"{option} = {value!r} did not change {metric}"


def test_grad_micro_batches_beyond_a_step_s_micro_batches_is_refused():
    """It was silently capped: objective_gradients takes the first grad_micro_batches micro-batches, of which there are 2."""
    over = ["reward_combiner.name=mirror_descent", "rollout.prompts_per_step=2", "rollout.group_size=4", "train.micro_batch_size=4"]
    assert method_problem(load_config(preset="demo", overrides=[*over, "reward_combiner.options={grad_micro_batches: 2}"])) is None
    assert method_problem(load_config(preset="demo", overrides=[*over, "reward_combiner.options={grad_micro_batches: 3}"])) == (
        "reward_combiner.options.grad_micro_batches = 3 exceeds the 2 micro-batch(es) of a step (rollout.prompts_per_step x "
        "rollout.group_size / train.micro_batch_size): set it to at most 2")


def test_pass_rate_bounds_over_rows_without_a_pass_rate_are_refused_at_load():
    """They were silently no-ops: with no row carrying a rate (column or pass_rates), the offline filter keeps every row."""
    from grpokit.trainer.inputs import RunContractError, check_data

    rows = [{"prompt": "What is 1 + 2?", "answer": "3"}, {"prompt": "What is 2 + 2?", "answer": "4"}]
    cfg = load_config(preset="demo", overrides=["data.curriculum=pass_rate_filter", "data.curriculum_options={low: 0.2, pass_rates: {typo: 0.5}}"])
    with pytest.raises(RunContractError) as exc:
        check_data(cfg, rows)
    assert str(exc.value) == ("data.curriculum_options.low filters by a precomputed pass rate, and none of the 2 training rows has one "
                              "(no 'pass_rate' column, no prompt of pass_rates): add the column, fix pass_rates / pass_rate_column, "
                              "or remove low, pass_rates")
    check_data(cfg, [*rows, {"prompt": "What is 3 + 2?", "answer": "5", "pass_rate": 0.5}])  # one row with a rate: it acts
    online = load_config(preset="demo", overrides=["data.curriculum=pass_rate_filter", "data.curriculum_options={min_observations: 1}"])
    check_data(online, rows)  # the online filter needs no precomputed rate
