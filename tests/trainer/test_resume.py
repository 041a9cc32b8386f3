"""Kill a run between checkpoints, resume it: same data order and same next-step metrics."""

import json

import pytest

from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer

VOLATILE = ("time/", "tokens_per_s")


class Killed(Exception):
    pass


def records(run_dir, name):
    return [json.loads(l) for l in (run_dir / name).read_text().splitlines()]


def stable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def test_resume_reproduces_uninterrupted_run(tiny_cfg, tmp_path, monkeypatch):
    common = {"train.steps": 5, "logging.checkpoint_every": 2, "optim.lr": 0.005}
    ref_cfg = tiny_cfg(**common, **{"logging.output_dir": str(tmp_path / "ref")})
    Trainer(ref_cfg, *tiny_model_and_tokenizer(seed=0)).train()

    cfg = tiny_cfg(**common, **{"logging.output_dir": str(tmp_path / "killed")})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    original = trainer.logger.log_metrics

    def log_then_die(step, metrics):
        original(step, metrics)
        if step == 3:  # checkpoint exists at step 2; step 3 is lost
            raise Killed()

    monkeypatch.setattr(trainer.logger, "log_metrics", log_then_die)
    with pytest.raises(Killed):
        trainer.train()
    monkeypatch.undo()

    # A fresh process would rebuild everything from the config: do the same.
    resumed = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    resumed.train(resume=True)
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "killed"
    got, want = stable(records(run_dir, "metrics.jsonl")), stable(records(ref_dir, "metrics.jsonl"))
    assert [r["step"] for r in got] == [1, 2, 3, 4, 5]
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-6), (g["step"], k)
    prompts = lambda rows: [(r["step"], r["prompt"]) for r in rows]  # noqa: E731
    assert prompts(records(run_dir, "samples.jsonl")) == prompts(records(ref_dir, "samples.jsonl"))


def test_ctrl_c_mid_step_saves_a_resumable_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    common = {"train.steps": 4, "logging.checkpoint_every": 0, "optim.lr": 0.005}
    ref_cfg = tiny_cfg(**common, **{"logging.output_dir": str(tmp_path / "ref")})
    Trainer(ref_cfg, *tiny_model_and_tokenizer(seed=0)).train()

    cfg = tiny_cfg(**common, **{"logging.output_dir": str(tmp_path / "int")})
    trainer = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    real_generate = trainer.backend.generate
    calls = {"n": 0}

    def generate_then_interrupt(*args, **kwargs):
        calls["n"] += 1
        out = real_generate(*args, **kwargs)  # consumes RNG and data like a real step
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(trainer.backend, "generate", generate_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert (tmp_path / "int" / "checkpoints" / "step-2").is_dir()

    Trainer(cfg, *tiny_model_and_tokenizer(seed=0)).train(resume=True)
    got = stable(records(tmp_path / "int", "metrics.jsonl"))
    want = stable(records(tmp_path / "ref", "metrics.jsonl"))
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    for g, w in zip(got, want):
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-6), (g["step"], k)


def test_a_fresh_run_in_a_used_folder_replaces_the_earlier_runs_logs(tiny_cfg, tmp_path):
    cfg = tiny_cfg(**{"train.steps": 2, "logging.output_dir": str(tmp_path / "run"), "eval.before": True, "eval.after": True})
    for _ in range(2):
        Trainer(cfg, *tiny_model_and_tokenizer(seed=0)).train()
    run = tmp_path / "run"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    labels = [json.loads(line)["label"] for line in (run / "eval.jsonl").read_text().splitlines()]
    assert steps == [1, 2] and labels == ["before", "after"]
