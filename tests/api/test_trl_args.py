"""GRPOConfig: TRL's argument names mapped onto the native Config, and the one-line refusals."""

import dataclasses

import pytest

from grpokit.api.trl_args import GRPOConfig, UnsupportedArgument
from grpokit.api.trl_fields import PLUMBING, REFUSED_UNLESS_DEFAULT
from grpokit.config.schema import Config


def test_batch_arguments_map_to_prompts_per_step_micro_batches_and_steps():
    args = GRPOConfig(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=2,
                      max_steps=6, num_iterations=2, learning_rate=3e-6, max_completion_length=16, seed=7)
    cfg = args.to_native(n_rows=10)
    # one optimizer step = 4 x 2 = 8 completions = 8 / G=2 = 4 prompts; micro-batches of 4
    assert (cfg.rollout.group_size, cfg.rollout.prompts_per_step, cfg.train.micro_batch_size) == (2, 4, 4)
    assert cfg.train.steps == 3  # 6 optimizer steps / mu=2 per grpokit step
    assert cfg.algorithm.num_iterations == 2 and cfg.optim.lr == 3e-6 and cfg.optim.betas == [0.9, 0.999]
    assert cfg.rollout.max_new_tokens == 16 and cfg.train.seed == 7 and cfg.data.seed == 7
    assert cfg.logging.output_dir == "out" and cfg.algorithm.std_eps == 1e-4  # TRL divides by std + 1e-4


def test_steps_per_generation_splits_one_generation_into_whole_group_optimizer_steps():
    # 8 x 4 = 32 completions per generation = 8 prompts of G=4; optimizer steps of 8 x 1 = 8 completions: 4 per generation
    args = GRPOConfig(per_device_train_batch_size=8, num_generations=4, steps_per_generation=4, max_steps=16, num_iterations=2)
    cfg = args.to_native(n_rows=10)
    assert (cfg.rollout.prompts_per_step, cfg.train.micro_batch_size, cfg.algorithm.mini_batches) == (8, 8, 4)
    assert cfg.train.steps == 2 and cfg.algorithm.updates_per_batch == 8  # 16 optimizer steps / (mu 2 x 4 mini-batches)
    assert GRPOConfig(per_device_train_batch_size=4, num_generations=2, generation_batch_size=12).to_native(4).algorithm.mini_batches == 3
    with pytest.raises(UnsupportedArgument, match="max_steps=6"):  # not a whole number of generations
        GRPOConfig(per_device_train_batch_size=8, num_generations=4, steps_per_generation=4, max_steps=6)


def test_epochs_count_prompts_per_step():
    # TRL's defaults: 8 completions per step, G = 8 -> 1 prompt per step; 3 epochs of 10 rows = 30 steps
    assert GRPOConfig().to_native(n_rows=10).train.steps == 30
    # 2.5 epochs of 10 rows at 4 prompts per step: ceil(25 / 4) = 7
    assert GRPOConfig(num_train_epochs=2.5, per_device_train_batch_size=8, num_generations=2).to_native(10).train.steps == 7


@pytest.mark.parametrize("loss_type, aggregation", [("grpo", "seq_mean_token_mean"), ("dapo", "token_mean"), ("dr_grpo", "constant")])
def test_loss_types_pick_the_aggregation(loss_type, aggregation):
    cfg = GRPOConfig(loss_type=loss_type, scale_rewards=False, epsilon=0.1, epsilon_high=0.3).to_native(4)
    assert (cfg.algorithm.loss, cfg.algorithm.aggregation, cfg.algorithm.scale) == ("ppo_clip", aggregation, "none")
    assert (cfg.algorithm.epsilon_low, cfg.algorithm.epsilon_high) == (0.1, 0.3)


@pytest.mark.parametrize("kwargs, named", [
    (dict(min_p=0.1), "min_p=0.1"),
    (dict(use_vllm=True), "use_vllm=True"),
    (dict(beta=0.04), "beta=0.04"),
    (dict(warmup_steps=10), "warmup_steps=10"),
    (dict(loss_type="vespo"), "loss_type='vespo'"),
    (dict(shuffle_dataset=False), "shuffle_dataset=False"),
    (dict(report_to="mlflow"), "report_to=['mlflow']"),
    (dict(per_device_train_batch_size=6, num_generations=4), "num_generations=4"),
    (dict(steps_per_generation=3, gradient_accumulation_steps=2), "steps_per_generation=3"),  # 1.5 optimizer steps
    (dict(per_device_train_batch_size=4, steps_per_generation=4), "steps_per_generation=4"),  # 4-row steps, groups of 8
    (dict(model_init_kwargs={"attn_implementation": "sdpa"}), "model_init_kwargs="),
    (dict(importance_sampling_level="sequence"), "importance_sampling_level='sequence'"),  # with TRL's default loss_type dapo
])
def test_an_argument_grpokit_cannot_honour_is_refused_in_one_line_naming_it(kwargs, named):
    with pytest.raises(UnsupportedArgument) as err:
        GRPOConfig(**kwargs)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_accepted_values_are_not_refused():
    args = GRPOConfig(beta=0.04, use_bias_correction_kl=False, optim="adamw_torch", dataloader_num_workers=4,
                      report_to="tensorboard", push_to_hub=False, run_name="x")
    cfg = args.to_native(4)
    assert cfg.algorithm.beta == 0.04 and cfg.algorithm.kl == "k3" and cfg.logging.report_to == ["tensorboard"]
    assert args.dataloader_num_workers == 4 and args.per_device_eval_batch_size == 8 and args.hub_model_id is None


def test_an_unknown_argument_is_a_type_error_with_a_suggestion():
    with pytest.raises(TypeError, match="'num_generation'.*did you mean 'num_generations'"):
        GRPOConfig(num_generation=4)


def test_grpokit_overrides_take_dotted_or_nested_keys_on_top_of_the_mapping():
    args = GRPOConfig(temperature=0.7, grpokit={"algorithm.advantage": "rloo", "rollout": {"temperature": 0.5, "top_k": 5}})
    cfg = args.to_native(4)
    assert cfg.algorithm.advantage == "rloo" and cfg.rollout.temperature == 0.5 and cfg.rollout.top_k == 5


def test_a_native_config_keeps_its_settings_except_the_trl_arguments_given():
    native = Config()
    native.algorithm.advantage, native.rollout.temperature, native.optim.lr = "rloo", 0.6, 2e-5
    cfg = GRPOConfig(output_dir="o", learning_rate=1e-4, max_steps=5, grpokit=native).to_native(4)
    assert cfg.algorithm.advantage == "rloo" and cfg.rollout.temperature == 0.6  # not TRL's 1.0
    assert cfg.optim.lr == 1e-4 and cfg.train.steps == 5 and cfg.logging.output_dir == "o"


def test_a_bad_native_override_is_one_line_naming_the_key():
    with pytest.raises(ValueError, match=r"grpokit=.*algorithm.advantag") as err:
        GRPOConfig(grpokit={"algorithm.advantag": "rloo"}).to_native(4)
    assert "\n" not in str(err.value)


def test_every_field_is_documented_and_no_name_is_in_two_tables():
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert all(f.metadata.get("doc") for f in dataclasses.fields(GRPOConfig))
    assert not fields & set(PLUMBING) and not fields & set(REFUSED_UNLESS_DEFAULT) and not set(PLUMBING) & set(REFUSED_UNLESS_DEFAULT)


def test_max_prompt_length_is_not_a_trl_1_16_argument_either():
    trl = pytest.importorskip("trl")
    with pytest.raises(TypeError):
        trl.GRPOConfig(output_dir="o", max_prompt_length=128)
    with pytest.raises(TypeError, match="max_prompt_length"):
        GRPOConfig(output_dir="o", max_prompt_length=128)


def test_report_to_takes_a_string_or_a_list_and_none_is_empty():
    assert GRPOConfig(report_to="none").report_to == [] and GRPOConfig(report_to=["tensorboard", "trackio"]).report_to == ["tensorboard", "trackio"]
    assert GRPOConfig(report_to="tensorboard").to_native(4).logging.report_to == ["tensorboard"]


def test_save_arguments_map_to_checkpoint_every_and_keep():
    cfg = GRPOConfig(save_steps=4, num_iterations=2, max_steps=8, save_total_limit=1).to_native(4)
    assert (cfg.logging.checkpoint_every, cfg.logging.keep_checkpoints) == (2, 1)  # 4 optimizer steps = 2 grpokit steps of mu=2
    assert GRPOConfig(save_strategy="no").to_native(4).logging.checkpoint_every == 0


def test_to_dict_lists_every_trl_argument_with_its_value():
    d = GRPOConfig(output_dir="o", run_name="r", learning_rate=2e-6).to_dict()
    assert d["output_dir"] == "o" and d["run_name"] == "r" and d["learning_rate"] == 2e-6 and d["use_vllm"] is False
    assert len(d) == len(PLUMBING) + len(REFUSED_UNLESS_DEFAULT) + len(dataclasses.fields(GRPOConfig)) - 1  # all but grpokit=
