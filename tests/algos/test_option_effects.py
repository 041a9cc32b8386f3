"""Every option of every registered policy loss and advantage changes the update, or is refused at load.

For each registered name, each option key it takes (its keyword parameters and option-schedule
parameters, and the config fields it reads as context: ``algorithm.epsilon_low/high``,
``ratio``, ``scale``, ``std_mode``, ``std_eps``) needs an entry below: an alternative value
(with the other options it needs to act) under which the gradient on a fixed off-policy batch
differs from the default's, or a reason it is refused at load. A newly registered variant or
option without an entry fails here.
"""

import pytest
import torch

from grpokit.algos.advantages import ADVANTAGES
from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.registry import call_with

LOSS_CONTEXT = {"epsilon_low": 0.2, "epsilon_high": 0.2, "ratio": "token"}  # the config's defaults
ADV_CONTEXT = {"scale": "group", "std_mode": "unbiased", "std_eps": 1e-6}

# option -> alternative value, or (alternative value, other options that make it act)
LOSS_ALTERNATIVES = {
    "ppo_clip": {"epsilon_low": 0.01, "epsilon_high": 0.01, "ratio": "sequence", "clip_ratio_c": 1.05},
    "cispo": {"is_clip_low": 0.05, "is_clip_high": 0.01, "ppo_mask": True, "ratio": "sequence",
              "epsilon_low": (0.01, {"ppo_mask": True}), "epsilon_high": (0.01, {"ppo_mask": True})},
    "disco": {"score": "l_ratio", "tau": 0.5, "local_constraint": True, "delta": (0.5, {"local_constraint": True}),
              "constraint_beta": (10.0, {"local_constraint": True})},
    "disco_b": {"score": "l_ratio", "local_constraint": True, "delta": (0.5, {"local_constraint": True}),
                "constraint_beta": (10.0, {"local_constraint": True})},
    "grpo_verif": {"alpha": 0.7, "epsilon_low": 0.01, "epsilon_high": 0.01},
    "humanline": {"log_eps_p": -0.05, "log_eps_r": 0.05, "epsilon_low": 0.01, "epsilon_high": 0.01},
    "kdrl": {"kd_coef": 0.5, "kd_estimator": "k3", "kd_mask": "none", "kd_placement": "reward", "kd_full_denominator": False,
             "epsilon_low": 0.01, "epsilon_high": 0.01, "ratio": "sequence", "clip_ratio_c": 1.05,
             # option_schedule options: they set kd_coef per step (checked through the schedule below)
             "beta_0": 0.1, "beta_min": (0.05, {"beta_0": 0.1, "kappa": 0.01}), "kappa": (0.001, {"beta_0": 0.1})},
    "papo": {"gamma": 0.5, "entropy_coef": 0.5, "kl_clip": 0.01, "epsilon_low": 0.01, "epsilon_high": 0.01,
             "ratio": "sequence", "clip_ratio_c": 1.05},
    "reg_grpo": {"eps": 0.5, "std_mode": "population", "length_norm": True, "skip_zero_var_groups": False},
    "sapo": {"tau_pos": 3.0, "tau_neg": 3.0},
    "ts_grpo": {"epsilon_low": 0.01, "epsilon_high": 0.01, "seq_epsilon_low": 0.5, "seq_epsilon_high": 0.5,
                "plan_weight": 0.5, "answer_weight": 0.5},
}
# options that do not change the gradient, with what happens to them instead
LOSS_NO_GRADIENT = {
    ("papo", "aux_grad"): "refused at load (vision/checks.py): the masked pass is scored without gradient",
    ("papo", "mask_entropy_coef"): "refused at load unless aux_grad (config/methods.py, reads_if): aux_logp is detached",
}
ADV_ALTERNATIVES = {
    "grpo": {"scale": "batch", "clip": 0.5, "std_mode": "population", "std_eps": 0.5, "allow_singleton_groups": (True, {})},
    "dr_grpo": {"allow_singleton_groups": True},
    "rloo": {"divide_by_std": True, "allow_singleton_groups": True, "std_mode": ("population", {"divide_by_std": True}),
             "std_eps": (0.5, {"divide_by_std": True})},
    "reinforce_pp_baseline": {"whiten": "token", "std_mode": "population", "std_eps": 0.5, "allow_singleton_groups": True},
    "passk": {"k": 2, "correct_threshold": (0.25, {"k": 2})},
    "drpo": {"std_mode": "population", "std_eps": 0.5, "k_max": 1, "elbow_tol": 5.0, "max_history": 1,
             "sort_group_rewards": True, "seed": 1},
}


def _batch():
    """9 rows (3 groups of 3; group 2 has equal rewards), 6 positions, off-policy by N(0.1, 0.4^2) in log space."""
    g = torch.Generator().manual_seed(0)
    b, t = 9, 6
    logp = (-torch.rand(b, t, generator=g) * 2 - 0.1).requires_grad_(True)
    old = logp.detach() + 0.1 + 0.4 * torch.randn(b, t, generator=g)
    lengths = torch.tensor([6, 4, 5, 3, 6, 2, 5, 4, 6])
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    adv, _ = ADVANTAGES.get("grpo")(rewards, group_ids)
    shift = lambda s: logp.detach() + s * torch.randn(b, t, generator=g)  # noqa: E731
    plan = (torch.arange(t)[None] < 2).float().expand(b, t).clone()
    verif = (torch.arange(t)[None] >= lengths[:, None] - 2).float() * mask
    return LossInputs(
        logp=logp, old_logp=old, adv=adv, mask=mask, ref_logp=shift(0.5), entropy=torch.rand(b, t, generator=g),
        group_ids=group_ids, rewards=rewards, teacher_logp=shift(0.5), aux_logp=shift(0.5), plan_mask=plan,
        verif_mask=verif, verif_adv=-adv, prev_logp=old,
    )


def _loss_gradient(name: str, options: dict) -> torch.Tensor:
    inp = _batch()
    spec = POLICY_LOSSES.spec(name)
    schedule = spec.option_schedule
    if schedule is not None:  # the trainer's per-step options (e.g. KDRL's kd_coef schedule), at step 10
        own = {k: options.pop(k) for k in list(options) if k in POLICY_LOSSES.option_names(name) and k not in _params(spec.fn)}
        options.update(schedule(10, **own))
    per_token, _ = call_with(spec.fn, inp, context={**LOSS_CONTEXT, **options})
    agg = AGGREGATIONS.get((spec.aggregations or ("seq_mean_token_mean",))[0])
    agg(per_token, inp.mask).backward()
    return inp.logp.grad


def _params(fn) -> set:
    import inspect

    return set(inspect.signature(fn).parameters)


def _cases(registry, context: dict, skip: dict) -> list:
    cases = []
    for name in registry.names():
        keys = set(registry.option_names(name)) | (registry.context_taken(name, context) & set(context))
        for key in sorted(keys):
            if (name, key) not in skip:
                cases.append((name, key))
    return cases


@pytest.mark.parametrize("name, option", _cases(POLICY_LOSSES, LOSS_CONTEXT, LOSS_NO_GRADIENT))
def test_every_loss_option_changes_the_gradient(name, option):
    entry = LOSS_ALTERNATIVES.get(name, {}).get(option)
    assert entry is not None, f"loss '{name}' option '{option}': add an alternative value that acts, or a reason to LOSS_NO_GRADIENT"
    value, base = entry if isinstance(entry, tuple) else (entry, {})
    default = _loss_gradient(name, dict(base))
    changed = _loss_gradient(name, {**base, option: value})
    assert (changed - default).abs().max() > 1e-6, f"{name}.{option} = {value!r} did not change the gradient"


@pytest.mark.parametrize("name, option", _cases(ADVANTAGES, ADV_CONTEXT, {}))
def test_every_advantage_option_changes_the_advantages(name, option):
    entry = ADV_ALTERNATIVES.get(name, {}).get(option)
    assert entry is not None, f"advantage '{name}' option '{option}': add an alternative value that acts"
    value, base = entry if isinstance(entry, tuple) else (entry, {})
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.8, 1.0, 1.0, 0.0, 0.3, 0.9, 0.2, 0.7, 0.4])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])  # groups of 4: passk's default k
    if option == "allow_singleton_groups":  # it acts on a batch with a group of one, which raises without it
        rewards, group_ids = torch.cat([rewards, torch.tensor([0.6])]), torch.cat([group_ids, torch.tensor([4])])
    mask = (torch.arange(5)[None] < torch.arange(len(rewards))[:, None] % 5 + 1).float()
    spec = ADVANTAGES.spec(name)
    domains = (["a"] * 8 + ["b"] * 4 + ["b"])[: len(rewards)]

    def run(opts):
        state = spec.make_state() if spec.make_state is not None else None
        context = {**ADV_CONTEXT, **{k: v for k, v in opts.items() if k in ADV_CONTEXT}, "state": state, "domains": domains, "mask": mask}
        own = {k: v for k, v in opts.items() if k not in ADV_CONTEXT}
        try:
            return call_with(spec.fn, rewards, group_ids, context=context, options=own)[0]
        except ValueError as exc:  # a singleton group without allow_singleton_groups
            return str(exc)

    if name == "drpo":  # its clustering options act on a history of questions: three steps of 24 questions
        run = _drpo_run
    default, changed = run(dict(base)), run({**base, option: value})
    if isinstance(default, str) or isinstance(changed, str):
        assert isinstance(default, str) != isinstance(changed, str), (default, changed)
    else:
        assert (changed - default).abs().max() > 1e-6, f"{name}.{option} = {value!r} did not change the advantages"


def _drpo_run(opts: dict) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    spec = ADVANTAGES.spec("drpo")
    state = spec.make_state()
    group_ids = torch.arange(24).repeat_interleave(4)
    domains = ["a" if q < 16 else "b" for q in range(24) for _ in range(4)]
    context = {**ADV_CONTEXT, **{k: v for k, v in opts.items() if k in ADV_CONTEXT}, "state": state, "domains": domains}
    own = {k: v for k, v in opts.items() if k not in ADV_CONTEXT}
    for _ in range(3):
        rewards = (torch.rand(96, generator=g) < torch.rand(24, generator=g).repeat_interleave(4)).float()
        adv = call_with(spec.fn, rewards, group_ids, context=context, options=own)[0]
    return adv


def test_the_options_without_gradient_are_the_listed_ones():
    """The two papo options that cannot act on the gradient stay named here (and in the report), not silently."""
    for name, option in LOSS_NO_GRADIENT:
        assert option in POLICY_LOSSES.option_names(name)
        value = True if option == "aux_grad" else 0.5
        assert (_loss_gradient(name, {option: value}) - _loss_gradient(name, {})).abs().max() <= 1e-7


TOKEN_WEIGHT_ALTERNATIVES = {"forking": {"rho": 0.5, "scope": "sequence"}}
CORRECTION_ALTERNATIVES = {
    "decoupled": {"cap": 1.2},
    "mis_sequence": {"low": 0.95, "high": 1.05, "geometric": True},
    "mis_token": {"low": 0.95, "high": 1.05},
    "tis_sequence": {"cap": 1.05, "geometric": True},
    "tis_token": {"cap": 1.05},
}


@pytest.mark.parametrize("axis, table", [("token_weights", TOKEN_WEIGHT_ALTERNATIVES), ("correction", CORRECTION_ALTERNATIVES)])
def test_every_token_weighting_and_correction_option_changes_the_weights(axis, table):
    from grpokit.registries import get_registry

    registry = get_registry(axis)
    g = torch.Generator().manual_seed(1)
    b, t = 6, 5
    mask = (torch.arange(t)[None] < torch.tensor([5, 3, 4, 5, 2, 4])[:, None]).float()
    old = -torch.rand(b, t, generator=g)
    behaviour = old + 0.3 * torch.randn(b, t, generator=g)
    context = {"entropy": torch.rand(b, t, generator=g), "group_ids": torch.tensor([0, 0, 0, 1, 1, 1]),
               "completion_ids": torch.randint(0, 3, (b, t), generator=g), "rewards": torch.tensor([1.0, 0, 0, 1, 1, 0])}

    def run(name, opts):
        if axis == "correction":
            return call_with(registry.get(name), old, behaviour, mask, context={}, options=opts)[0]
        return call_with(registry.get(name), mask, context=context, options=opts)[0]

    for name in registry.names():
        for option in registry.option_names(name):
            assert option in table.get(name, {}), f"{axis} '{name}' option '{option}': add an alternative value that acts"
            assert (run(name, {option: table[name][option]}) - run(name, {})).abs().max() > 1e-6, f"{name}.{option}"


OFFLINE_ALTERNATIVES = {
    "humanline_dpo": {"log_eps_p": -0.05, "log_eps_r": 0.05},
    "kto": {"desirable_weight": 2.0, "undesirable_weight": 2.0},
    "humanline_kto": {"desirable_weight": 2.0, "undesirable_weight": 2.0, "log_eps_p": -0.05, "log_eps_r": 0.05},
    "tpsft": {"epsilon": 0.01},
}


def test_every_offline_loss_option_changes_the_gradient():
    from grpokit.algos.offline import OFFLINE_LOSSES, OfflineInputs

    g = torch.Generator().manual_seed(2)
    b, t = 4, 5
    mask = (torch.arange(t)[None] < torch.tensor([5, 3, 4, 2])[:, None]).float()
    base_logp = -torch.rand(b, t, generator=g)
    fields = dict(mask=mask, ref_logp=base_logp + 0.4 * torch.randn(b, t, generator=g), label=torch.tensor([1.0, 0.0, 1.0, 0.0]),
                  kl_logp=-torch.rand(b, t, generator=g), kl_ref_logp=-torch.rand(b, t, generator=g), kl_mask=mask)
    context = {"beta": 0.1, "num_rows": float(b), "num_tokens": float(mask.sum())}

    def grad(name, opts):
        logp = base_logp.clone().requires_grad_(True)
        loss, _ = call_with(OFFLINE_LOSSES.get(name), OfflineInputs(logp=logp, **fields), context=context, options=opts)
        loss.backward()
        return logp.grad

    for name in OFFLINE_LOSSES.names():
        for option in OFFLINE_LOSSES.option_names(name):
            assert option in OFFLINE_ALTERNATIVES.get(name, {}), f"offline loss '{name}' option '{option}': add an alternative value"
            value = OFFLINE_ALTERNATIVES[name][option]
            assert (grad(name, {option: value}) - grad(name, {})).abs().max() > 1e-6, f"{name}.{option}"
