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
    entry = COMBINER_ALTERNATIVES.get(name, {}).get(option)
    assert entry is not None, f"combiner '{name}' option '{option}': add an alternative value that acts"
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
    with pytest.raises(ValueError) as exc:
        COMBINERS.check_options("mirror_descent", {"influence": [1.0, 0.0]}, "reward_combiner.options")
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
    value = LIKELIHOOD_ALTERNATIVES.get(name, {}).get(option)
    assert value is not None, f"likelihood '{name}' option '{option}': add an alternative value that acts"
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
