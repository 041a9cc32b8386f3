"""Config fields that the chosen methods would ignore or misread are refused at load, in one line."""

import pytest

from grpokit.config.loading import load_config, preset_names
from grpokit.config.methods import method_problem
from grpokit.registries import get_registry
from grpokit.trainer.inputs import RunContractError, check_run


def problem(*overrides: str, preset: str = "demo"):
    return method_problem(load_config(preset=preset, overrides=list(overrides)))


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_sets_only_fields_its_methods_read(preset):
    assert problem(preset=preset) is None


@pytest.mark.parametrize("loss", ["disco", "disco_b", "humanline", "reg_grpo", "sapo", "grpo_verif", "ts_grpo"])
def test_a_ratio_the_loss_does_not_read_is_refused_naming_the_losses_that_do(loss):
    msg = problem(f"algorithm.loss={loss}", "algorithm.ratio=sequence")
    assert msg.startswith("algorithm.ratio 'sequence' is not read by algorithm.loss")
    assert "cispo, kdrl, papo, ppo_clip" in msg and "\n" not in msg


def test_the_losses_that_read_the_ratio_accept_every_ratio():
    for loss in ("ppo_clip", "cispo", "kdrl", "papo"):
        for ratio in ("token", "sequence", "span"):
            assert problem(f"algorithm.loss={loss}", f"algorithm.ratio={ratio}") is None
    assert problem("algorithm.loss=ts_grpo", "algorithm.ratio=span") is None  # the ratio it computes with


def test_gspo_with_token_mean_is_refused_and_cispo_s_detached_weight_is_not():
    assert "set algorithm.aggregation=seq_mean_token_mean" in problem("algorithm.ratio=sequence", "algorithm.aggregation=token_mean")
    assert "set algorithm.aggregation=seq_mean_token_mean" in problem("algorithm.ratio=span", "algorithm.aggregation=constant")
    assert problem("algorithm.ratio=sequence", "algorithm.aggregation=seq_mean_token_mean") is None
    # CISPO's ratio is a stop-gradient weight: no sequence gradient to get wrong
    assert problem("algorithm.loss=cispo", "algorithm.ratio=sequence", "algorithm.aggregation=token_mean") is None


@pytest.mark.parametrize("loss", ["disco", "disco_b", "reg_grpo", "ts_grpo", "grpo_verif"])
def test_a_loss_built_for_the_sequence_mean_refuses_other_aggregations(loss):
    assert "does not give algorithm.loss" in problem(f"algorithm.loss={loss}", "algorithm.aggregation=token_mean")


@pytest.mark.parametrize("overrides, field", [
    (["algorithm.loss=sapo", "algorithm.epsilon_high=0.28"], "algorithm.epsilon_high"),
    (["algorithm.loss=disco", "algorithm.epsilon_low=0.1"], "algorithm.epsilon_low"),
    (["algorithm.loss=reg_grpo", "algorithm.epsilon_low=0.1"], "algorithm.epsilon_low"),
    (["algorithm.loss=cispo", "algorithm.epsilon_high=0.28"], "algorithm.epsilon_high"),  # only with ppo_mask
    (["algorithm.advantage=dr_grpo", "algorithm.scale=none"], "algorithm.scale"),
    (["algorithm.advantage=dr_grpo", "algorithm.std_eps=1e-4"], "algorithm.std_eps"),
    (["algorithm.advantage=passk", "algorithm.std_mode=population"], "algorithm.std_mode"),
    (["algorithm.advantage=rloo", "algorithm.std_eps=1e-4"], "algorithm.std_eps"),  # only with divide_by_std
    (["algorithm.advantage=rloo", "algorithm.scale=batch"], "algorithm.scale"),
    (["algorithm.scale=none", "algorithm.std_eps=1e-4"], "algorithm.std_eps"),  # grpo without a std
    (["algorithm.kl=k2"], "algorithm.kl"),  # beta 0
    (["algorithm.kl_clamp=true"], "algorithm.kl_clamp"),  # beta 0
    (["algorithm.beta=0.1", "algorithm.kl=none"], "algorithm.beta"),
    (["algorithm.entropy_band_quantiles=[0.2, 0.6]"], "algorithm.entropy_band_quantiles"),
    (["algorithm.max_sampling_rounds=2"], "algorithm.max_sampling_rounds"),  # without dynamic sampling
    (["algorithm.plan_delimiter='='"], "algorithm.plan_delimiter"),  # ppo_clip with the token ratio
    (["algorithm.ref_sync_every=1"], "algorithm.ref_sync_every"),  # beta 0, ppo_clip: no reference is read
    (["algorithm.correction_options={cap_: 2}"], "algorithm.correction_options"),  # auto = decoupled: its keys
])
def test_a_field_nothing_reads_is_refused_in_one_line(overrides, field):
    msg = problem(*overrides)
    assert msg is not None and msg.startswith(field) and "\n" not in msg


@pytest.mark.parametrize("overrides", [
    ["algorithm.loss=cispo", "algorithm.epsilon_high=0.28", "algorithm.loss_options={ppo_mask: true}"],
    ["algorithm.advantage=rloo", "algorithm.std_eps=1e-4", "algorithm.advantage_options={divide_by_std: true}"],
    ["algorithm.scale=batch", "algorithm.std_eps=1e-4"],
    ["algorithm.loss=humanline", "algorithm.epsilon_high=0.28"],
    ["algorithm.beta=0.1", "algorithm.kl=k2", "algorithm.kl_clamp=true"],
    ["algorithm.entropy_band_coef=1.0", "algorithm.entropy_band_quantiles=[0.2, 0.6]"],
    ["algorithm.dynamic_sampling=true", "algorithm.max_sampling_rounds=2"],
    ["algorithm.ratio=span", "algorithm.plan_delimiter='='"],
    ["algorithm.loss=humanline", "algorithm.ref_sync_every=1"],
    ["algorithm.beta=0.1", "algorithm.ref_sync_every=1"],
    ["algorithm.correction_options={cap: 2.0}"],
])
def test_the_same_fields_are_accepted_where_they_act(overrides):
    assert problem(*overrides) is None


def test_the_trainer_s_load_time_check_raises_the_problem():
    with pytest.raises(RunContractError, match="^algorithm.ratio 'sequence' is not read by algorithm.loss 'sapo'"):
        check_run(load_config(preset="demo", overrides=["algorithm.loss=sapo", "algorithm.ratio=sequence"]))


def test_declared_ratios_agree_with_the_signatures():
    """A loss that takes the ``ratio`` keyword declares ratios=None (any); one that does not, a tuple of names."""
    import inspect

    losses, ratios = get_registry("loss"), get_registry("ratio")
    for name in losses.names():
        spec = losses.spec(name)
        takes = "ratio" in inspect.signature(spec.fn).parameters
        assert (spec.ratios is None) == takes, name
        assert spec.ratios is None or set(spec.ratios) <= set(ratios.names()), name
        for agg in spec.aggregations or ():
            assert agg in get_registry("aggregation"), name


def test_an_option_switched_off_by_another_is_refused():
    msg = problem("algorithm.loss=kdrl", "algorithm.loss_options={kd_placement: reward, kd_estimator: k3}")
    assert msg.startswith("algorithm.loss_options.kd_estimator is read by algorithm.loss 'kdrl' only when kd_placement")
    assert problem("algorithm.loss=kdrl", "algorithm.loss_options={kd_placement: loss, kd_estimator: k3}") is None


def test_papo_mask_entropy_coef_without_a_gradient_through_the_masked_pass_is_refused():
    # eta_2 multiplies the detached masked-image log-probs (the authors' RECOMPUTE_AUG_LOG_PROBS=False): no update
    msg = problem("algorithm.loss=papo", "algorithm.loss_options={mask_entropy_coef: 0.03}")
    assert msg.startswith("algorithm.loss_options.mask_entropy_coef is read by algorithm.loss 'papo' only when aux_grad")
    assert problem("algorithm.loss=papo", "algorithm.loss_options={entropy_coef: 0.03}") is None


def test_a_combiner_whose_step_scale_the_advantage_divides_out_is_refused():
    # hypervolume multiplies every reward of a step by one m; (mR - m mu) / (m sigma + eps) cancels it
    msg = problem("reward_combiner.name=hypervolume")
    assert msg.startswith("reward_combiner.name 'hypervolume' scales each step's rewards by one number")
    for ok in (["algorithm.advantage=dr_grpo"], ["algorithm.scale=none"], ["algorithm.advantage=rloo"]):
        assert problem("reward_combiner.name=hypervolume", *ok) is None
    assert problem("reward_combiner.name=hypervolume", "algorithm.advantage=rloo", "algorithm.advantage_options={divide_by_std: true}")


def test_an_entropy_bonus_on_a_policy_without_entropies_is_refused():
    # the masked-diffusion and flow policies' learner forwards give no entropy: the bonus was skipped
    for preset in ("espo", "flow_grpo"):
        assert problem("algorithm.entropy_coef=0.01", preset=preset).startswith("algorithm.entropy_coef = 0.01 needs per-unit entropies")
    assert problem("algorithm.entropy_coef=0.01") is None
    assert problem("algorithm.entropy_coef=0.01", "rollout.backend=vllm") is None  # the learner's own forward has them


def test_a_producer_option_for_a_combiner_without_that_input_is_refused():
    # validation_prompts / grad_* are read by the trainer's producers, so check_options let them through for any combiner
    msg = problem("reward_combiner.options={validation_prompts: 8}")
    assert msg.startswith("reward_combiner.options.validation_prompts sets the producer of 'validation', which combiner 'fixed'")
    assert "grad_micro_batches" in problem("reward_combiner.name=normalize_sum", "reward_combiner.options={grad_micro_batches: 2}")
    assert problem("reward_combiner.name=mirror_descent", "reward_combiner.options={grad_micro_batches: 2}") is None


def test_a_combiner_std_option_without_z_scores_is_refused():
    base = ("reward_combiner.name=mirror_descent",)
    msg = problem(*base, "reward_combiner.options={std_eps: 1e-3}")
    assert msg.startswith("reward_combiner.options.std_eps is read by reward_combiner.name 'mirror_descent' only when normalize")
    assert problem(*base, "reward_combiner.options={std_eps: 1e-3, normalize: true}") is None


@pytest.mark.parametrize("loss", ["disco", "disco_b", "reg_grpo"])
def test_token_weights_on_a_sequence_level_loss_are_refused(loss):
    msg = problem(f"algorithm.loss={loss}", "algorithm.token_weights=lambda_grpo")
    assert msg.startswith("algorithm.token_weights 'lambda_grpo' weights tokens, but algorithm.loss")
    assert problem("algorithm.token_weights=lambda_grpo") is None  # ppo_clip: per-token terms


def test_kdrl_schedule_options_refuse_the_ones_it_overrides_or_ignores():
    # beta_0 set: the schedule replaces kd_coef every step; beta_0 unset: beta_min / kappa shape nothing
    msg = problem("algorithm.loss=kdrl", "algorithm.loss_options={beta_0: 0.01, kd_coef: 0.1}")
    assert msg.startswith("algorithm.loss_options.kd_coef is read by algorithm.loss 'kdrl' only when beta_0 is one of [None]")
    msg = problem("algorithm.loss=kdrl", "algorithm.loss_options={kappa: 0.001}")
    assert msg.startswith("algorithm.loss_options.kappa is read by algorithm.loss 'kdrl' only when beta_0 is set (not null)")
    assert problem("algorithm.loss=kdrl", "algorithm.loss_options={beta_0: 0.01, beta_min: 0.001, kappa: 0.001}") is None
    assert problem("algorithm.loss=kdrl", "algorithm.loss_options={kd_coef: 0.1}") is None
    assert problem(preset="kdrl") is None
