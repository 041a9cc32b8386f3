"""KDRL distils from a teacher that differs from the student: a run folder grpokit trained first.

The preset's teacher is ``runs/demo`` (the demo's newest complete checkpoint); a teacher equal to
the student's own starting model, or one that does not exist, is refused at load in one line.
"""

import json

import pytest

from grpokit.config import load_config
from grpokit.testing import save_tiny_model
from grpokit.trainer.checkpoint import CheckpointError, model_source
from grpokit.trainer.inputs import RunContractError, check_run
from grpokit.trainer.loop import Trainer

TINY = [
    "logging.progress=false", "logging.log_samples_every=0", "data.n_train=8", "data.n_heldout=2",
    "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6",
    "train.micro_batch_size=8", "train.max_minutes=0", "eval.before=false", "eval.after=false",
]


def test_the_kdrl_preset_teacher_is_not_the_student():
    cfg = load_config(preset="kdrl")
    assert cfg.model.teacher not in (None, cfg.model.name)  # d3cb0f9 distilled smollm2 into itself


def test_teacher_equal_to_the_student_is_refused(tmp_path):
    tiny = save_tiny_model(tmp_path / "tiny")
    cfg = load_config(preset="kdrl", overrides=[f"model.name={tiny}", f"model.teacher={tiny}"])
    with pytest.raises(RunContractError, match="teacher equals the student.*grpokit train --preset demo"):
        check_run(cfg)
    cfg = load_config(preset="kdrl", overrides=[f"model.name={tiny}"])
    cfg.model.teacher = str(tmp_path / "runs" / "demo")  # not trained yet
    with pytest.raises(RunContractError, match="does not exist.*grpokit train --preset demo"):
        check_run(cfg)


def test_run_folder_resolves_to_its_newest_complete_checkpoint(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="without a complete checkpoint"):
        model_source(str(run))
    assert model_source("smollm2-135m-instruct") == "smollm2-135m-instruct"


def test_kdrl_trains_against_a_teacher_grpokit_trained_first(tmp_path):
    student = save_tiny_model(tmp_path / "student")
    teacher_run = tmp_path / "teacher_run"
    first = load_config(preset="demo", overrides=TINY + [
        f"model.name={student}", f"logging.output_dir={teacher_run}", "train.steps=2", "optim.lr=0.05",
        "rewards=[{name: length_target, kwargs: {target: 3}}]",  # varies within a group for a random model
    ])
    Trainer(first).train()  # command 1: train the teacher on the task
    assert model_source(str(teacher_run)).endswith("step-2")
    cfg = load_config(preset="kdrl", overrides=TINY + [
        f"model.name={student}", f"model.teacher={teacher_run}", f"logging.output_dir={tmp_path / 'kdrl'}",
        "train.steps=1", "algorithm.loss_options.kd_mask=none",
    ])
    Trainer(cfg).train()  # command 2: distil it into the starting model
    row = json.loads((tmp_path / "kdrl" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["kd/teacher_gap"] > 1e-3  # the teacher's log-probs differ from the student's
    assert row["kd/kl"] > 0
