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


# ---------------------------------------------------------------- --resume without a complete checkpoint


def saved_checkpoint(root, step):
    """A real checkpoint of the tiny model (what Trainer.save writes), in a fraction of a second."""
    import torch

    from grpokit.trainer import checkpoint as ckpt_io

    model, tok = tiny_model_and_tokenizer(seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    model(torch.tensor([[5, 6]])).logits.sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return ckpt_io.save_checkpoint(root, step, model=model, tokenizer=tok, optimizer=opt, scheduler=sched,
                                   state={"sampler": {"epoch": 0}}, extra={"part": {}})


def corrupt(path, blob=b"\x00" * 64):
    path.write_bytes(blob)


@pytest.mark.parametrize("damage, problem", [
    (lambda c: corrupt(c / "model.safetensors"), r"step-1 is incomplete: model.safetensors unreadable \(SafetensorError: .*header"),
    (lambda c: corrupt(c / "model.safetensors", (c / "model.safetensors").read_bytes()[:-100]), r"step-1 is incomplete: model.safetensors unreadable .*not fully covered"),
    (lambda c: (c / "optimizer.pt").unlink(), r"step-1 is incomplete: missing optimizer.pt"),
    (lambda c: (c / "model.safetensors").unlink(), r"step-1 is incomplete: missing model.safetensors"),
    (lambda c: corrupt(c / "optimizer.pt", (c / "optimizer.pt").read_bytes()[:200]), r"step-1 is incomplete: optimizer.pt unreadable \(RuntimeError: "),
    (lambda c: corrupt(c / "extra.pt"), r"step-1 is incomplete: extra.pt unreadable"),
    (lambda c: corrupt(c / "trainer_state.json", b'{"step": 1'), r"step-1 is incomplete: trainer_state.json unreadable \(JSONDecodeError: "),
    (lambda c: corrupt(c / "trainer_state.json", b'{"sampler": {}}'), r"step-1 is incomplete: trainer_state.json lacks its step or data position"),
])
def test_an_incomplete_checkpoint_is_named_with_what_is_wrong(tmp_path, damage, problem):
    from grpokit.trainer.checkpoint import CheckpointError, checkpoint_problem, latest_checkpoint, require_checkpoint

    ckpt = saved_checkpoint(tmp_path / "checkpoints", 1)
    assert checkpoint_problem(ckpt) is None and require_checkpoint(tmp_path / "checkpoints") == ckpt
    damage(ckpt)
    assert latest_checkpoint(tmp_path / "checkpoints") is None
    with pytest.raises(CheckpointError, match=rf"^cannot resume: no complete checkpoint in '{tmp_path / 'checkpoints'}' "
                                              rf"\({problem}.*\); drop --resume to start a fresh run there, or point "
                                              r"logging.output_dir at the run to continue$") as err:
        require_checkpoint(tmp_path / "checkpoints")
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)


@pytest.mark.parametrize("make", [lambda root: None, lambda root: root.mkdir(), lambda root: (root / ".tmp-step-3").mkdir(parents=True)])
def test_no_checkpoint_at_all_is_none_found(tmp_path, make):
    from grpokit.trainer.checkpoint import CheckpointError, require_checkpoint

    make(tmp_path / "checkpoints")  # no folder / an empty one / only a half-written temporary one
    with pytest.raises(CheckpointError, match=r"no complete checkpoint in '.*checkpoints' \(none found\); drop --resume"):
        require_checkpoint(tmp_path / "checkpoints")


def test_the_newest_complete_checkpoint_is_used_with_a_warning(tmp_path, caplog):
    from grpokit.trainer.checkpoint import latest_checkpoint, require_checkpoint

    root = tmp_path / "checkpoints"
    older, newer = saved_checkpoint(root, 2), saved_checkpoint(root, 10)  # 10 > 2 numerically, not by name
    assert require_checkpoint(root) == newer
    corrupt(newer / "model.safetensors")
    with caplog.at_level("WARNING", logger="grpokit.trainer.checkpoint"):
        assert require_checkpoint(root) == older and latest_checkpoint(root) == older
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # the CLI and Trainer.resume both check: one warning
    assert warnings[0].startswith(f"{newer} is incomplete: model.safetensors unreadable") and warnings[0].endswith(
        f"resuming from the older {older}")


@pytest.mark.parametrize("damage", ["corrupt", "missing", "empty"])
def test_cli_resume_without_a_complete_checkpoint_exits_with_one_line(tmp_path, monkeypatch, capsys, damage):
    import grpokit.distributed
    from grpokit.cli import main

    def no_trainer(cfg):
        raise AssertionError("a Trainer was built")

    monkeypatch.setattr(grpokit.distributed, "make_trainer", no_trainer)
    run = tmp_path / "run"
    if damage != "empty":
        ckpt = saved_checkpoint(run / "checkpoints", 1)
        corrupt(ckpt / "model.safetensors") if damage == "corrupt" else (ckpt / "rng.pt").unlink()
    before = sorted((p.relative_to(run), p.read_bytes()) for p in run.rglob("*") if p.is_file()) if run.exists() else []
    capsys.readouterr()  # drop save_pretrained's progress bar
    rc = main(["train", "--set", f"logging.output_dir={run}", "--resume"])
    err = capsys.readouterr().err.strip()
    want = {"corrupt": "step-1 is incomplete: model.safetensors unreadable", "missing": "step-1 is incomplete: missing rng.pt",
            "empty": "(none found)"}[damage]
    assert rc == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith("grpokit: error: cannot resume: no complete checkpoint") and want in err
    after = sorted((p.relative_to(run), p.read_bytes()) for p in run.rglob("*") if p.is_file()) if run.exists() else []
    assert after == before  # nothing trained, nothing overwritten


def test_resume_skips_a_corrupt_newest_checkpoint(tiny_cfg, tmp_path, caplog):
    from grpokit.trainer.checkpoint import checkpoint_problem

    cfg = tiny_cfg(**{"train.steps": 3, "logging.checkpoint_every": 1, "logging.keep_checkpoints": 3})
    Trainer(cfg, *tiny_model_and_tokenizer(seed=0)).train()
    run = tmp_path / "run"
    want = stable(records(run, "metrics.jsonl"))
    corrupt(run / "checkpoints" / "step-3" / "model.safetensors")
    (run / "checkpoints" / "step-2" / "scheduler.pt").unlink()
    resumed = Trainer(cfg, *tiny_model_and_tokenizer(seed=0))
    with caplog.at_level("WARNING"):
        resumed.train(resume=True)
    assert any("step-3 is incomplete" in r.getMessage() and "resuming from the older" in r.getMessage() for r in caplog.records)
    got = stable(records(run, "metrics.jsonl"))
    assert [r["step"] for r in got] == [1, 2, 3]  # step 1 kept, steps 2 and 3 trained again from step-1
    for g, w in zip(got, want):
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-6), (g["step"], k)
    assert checkpoint_problem(run / "checkpoints" / "step-3") is None  # rewritten whole


def test_a_resumed_run_reports_the_before_evaluation_of_the_run_it_continues(tiny_cfg, tmp_path):
    common = {"train.steps": 2, "logging.checkpoint_every": 1, "eval.before": True, "eval.after": False,
              "logging.output_dir": str(tmp_path / "run")}
    first = Trainer(tiny_cfg(**common), *tiny_model_and_tokenizer(seed=0)).train()
    again = Trainer(tiny_cfg(**common), *tiny_model_and_tokenizer(seed=0)).train(resume=True)  # already finished: no step
    assert again["steps"] == 2 and first["before"]["accuracy"] == again["before"]["accuracy"]
    assert again["before"]["n"] == first["before"]["n"] > 0
