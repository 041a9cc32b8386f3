"""Load-time refusals: a method whose input nothing produces, an unknown option key, a missing device.

Each fails with one line naming the method or field and the fix, before any model is loaded
(the loader is replaced by one that fails the test) and before anything trains.
"""

import re

import pytest
import torch

from grpokit.cli import main
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer import setup
from grpokit.trainer.inputs import RunContractError, check_run
from grpokit.trainer.loop import Trainer


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(cfg):
        raise AssertionError("the model was loaded although the config is refused")

    monkeypatch.setattr(setup, "load_policy", refuse)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"algorithm.loss": "papo"}, "algorithm.loss 'papo' needs input 'aux_logp'"),
        ({"algorithm.loss": "grpo_verif"}, "set verification.enabled=true"),
        ({"algorithm.loss": "kdrl"}, "set model.teacher"),
        ({"algorithm.loss": "ts_grpo"}, "set algorithm.plan_delimiter"),
        ({"algorithm.loss": "disco", "algorithm.loss_options": "{tua: 10}", "train.micro_batch_size": 4},
         "algorithm.loss_options ['tua'] is not an option of loss 'disco'; valid keys: constraint_beta, delta, local_constraint, score, tau"),
        ({"algorithm.advantage_options": "{k: 4}"}, "not an option of advantage 'grpo'"),
        ({"algorithm.token_weights": "forking", "algorithm.token_weights_options": "{rh0: 0.2}"}, "valid keys: rho, scope"),
        ({"reward_combiner.options": "{temperature: 2}"}, "not an option of combiner 'fixed'; valid keys: none"),
        ({"algorithm.correction": "tis_token", "algorithm.correction_options": "{cap_: 2}"}, "valid keys: cap"),
        ({"algorithm.loss": "disco", "train.micro_batch_size": 3}, "needs whole groups per micro-batch"),
    ],
)
def test_run_without_a_producer_or_with_an_unknown_option_is_refused_in_one_line(tiny_cfg, no_model_load, overrides, expected):
    cfg = tiny_cfg(**overrides)
    with pytest.raises(RunContractError) as err:
        Trainer(cfg)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_every_preset_passes_the_contract_check(tmp_path):
    """Every preset's methods get their inputs. A preset distilling from a run trained first
    (KDRL's teacher ``runs/demo``) is checked with that teacher present (a model folder here), and,
    where the run folder is absent, as on a fresh clone, refused in one line naming the recipe."""
    from pathlib import Path

    from grpokit.config import load_config
    from grpokit.config.loading import preset_names
    from grpokit.model.loading import EMBEDDED_MODELS

    stand_in = tmp_path / "teacher"
    stand_in.mkdir()
    for name in preset_names():
        cfg = load_config(preset=name)
        teacher = cfg.model.teacher
        if teacher and teacher not in EMBEDDED_MODELS and not Path(teacher).exists():
            with pytest.raises(RunContractError) as err:
                check_run(cfg)
            assert "model.teacher" in str(err.value) and "grpokit train --preset demo" in str(err.value)
            cfg = load_config(preset=name, overrides=[f"model.teacher={stand_in}"])
        check_run(cfg)


def test_cuda_on_a_machine_without_cuda_is_one_line_before_loading(tiny_cfg, no_model_load):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError) as err:
        Trainer(tiny_cfg(**{"model.device": "cuda"}))
    assert "model.device" in str(err.value) and "\n" not in str(err.value)


def test_cli_reports_the_contract_error_in_one_line_and_trains_nothing(tmp_path, capsys):
    code = main(["train", "--preset", "disco", "--set", f"logging.output_dir={tmp_path / 'run'}",
                 "--set", "algorithm.loss_options={tua: 10}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "'tua'" in err and "valid keys" in err
    assert not (tmp_path / "run").exists()


def test_plan_delimiter_found_in_no_sampled_completion_fails_before_the_first_update(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.loss": "ts_grpo", "algorithm.plan_delimiter": "QQQ"})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(ValueError, match="occurs in none of the 8 completions sampled at step 1"):
        trainer.train_step()
    assert trainer.step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))  # nothing trained


def test_plan_delimiter_the_tokenizer_cannot_write_is_refused_before_training(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.loss": "ts_grpo", "algorithm.plan_delimiter": "∴"})  # the tiny tokenizer has no "∴"
    with pytest.raises(RunContractError, match="plan_delimiter '∴' cannot be written by the policy's tokenizer") as err:
        Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    assert "\n" not in str(err.value)


def test_domain_aware_advantage_on_rows_without_a_domain_column_is_refused(tiny_cfg, tmp_path, no_model_load):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(f'{{"prompt": "What is {i} + 1?", "answer": "{i + 1}"}}\n' for i in range(10)))
    with pytest.raises(RunContractError) as err:
        Trainer(tiny_cfg(**{"data.path": str(data), "data.task": "null", "algorithm.advantage": "drpo"}))
    message = str(err.value)
    assert "needs input 'domains'" in message and "\n" not in message
    assert re.search(r"(\d+) of \1 training rows have no 'domain' column", message)  # every row lacks it
