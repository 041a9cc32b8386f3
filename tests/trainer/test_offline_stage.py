"""Offline stages (SFT, DPO, KTO, humanline DPO / KTO) through `grpokit train` and the OfflineTrainer, on the tiny model."""

import json
from pathlib import Path

import pytest
import torch

from grpokit.cli import main
from grpokit.config import load_config
from grpokit.config.schema import DataConfig
from grpokit.data.offline import encode, load_offline_splits
from grpokit.testing import implicit_device_recorder, save_tiny_model, tiny_tokenizer
from grpokit.trainer.memory import allocate_gradients
from grpokit.trainer.offline import OfflineTrainer

DATA = Path(__file__).resolve().parents[2] / "examples" / "offline"
FAST = ["logging.progress=false", "eval.max_new_tokens=4", "model.lora.target_modules=[q_proj, v_proj]"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def sets(pairs):
    return [a for p in pairs for a in ("--set", p)]


def evals(run_dir, split):
    rows = [json.loads(l) for l in (run_dir / "eval.jsonl").read_text().splitlines()]
    return {r["label"]: r for r in rows if r["split"] == split}


@pytest.mark.parametrize(
    "args,loss",
    [
        (["--stage", "sft", "--set", "data.task=null", "--set", f"data.path={DATA / 'sft.jsonl'}"], "sft"),
        (["--preset", "dpo", "--set", f"data.path={DATA / 'dpo.jsonl'}"], "dpo"),
        (["--preset", "dpo", "--set", f"data.path={DATA / 'dpo.jsonl'}"], "humanline_dpo"),
        (["--preset", "kto", "--set", f"data.path={DATA / 'kto.jsonl'}"], "kto"),
        (["--preset", "kto", "--set", f"data.path={DATA / 'kto.jsonl'}"], "humanline_kto"),
        (["--stage", "dpo", "--set", "data.task=null", "--set", f"data.path={DATA / 'dpo_chat.jsonl'}"], "dpo"),
    ],
)
def test_cli_stage_lowers_its_loss_on_the_training_rows(args, loss, tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    with implicit_device_recorder() as rec:
        code = main(["train", *args, *sets(FAST + [f"model.name={tiny_dir}", f"logging.output_dir={run}", f"offline.loss={loss}",
                                                   "train.steps=6", "optim.lr=1.0e-3"])])
    assert code == 0
    assert not rec.hits, f"tensors created without a device: {rec.report()}"
    train = evals(run, "train")
    assert train["after"]["loss"] < train["before"]["loss"] - 1e-3, train
    if loss != "sft":  # preferences: the implicit-reward margin of the training rows grows
        assert train["after"]["rewards/margins"] > train["before"]["rewards/margins"] + 1e-3, train
    steps = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == list(range(1, 7)) and all("grad_norm" in r for r in steps)
    assert (run / "checkpoints" / "step-6" / "trainer_state.json").is_file()
    out = capsys.readouterr().out
    assert f"{loss.split('_')[-1]} train loss before=" in out


def test_dpo_before_training_sits_at_log_2(tiny_dir, tmp_path):
    # policy = reference: every pair's margin is 0 and its loss -log sigmoid(0) = log 2
    cfg = load_config(preset="dpo", overrides=FAST + [f"model.name={tiny_dir}", f"logging.output_dir={tmp_path}",
                                                      f"data.path={DATA / 'dpo.jsonl'}"])
    trainer = OfflineTrainer(cfg)
    m = trainer.objective(trainer.train_examples, learn=False)
    assert m["loss"] == pytest.approx(0.6931471805599453, abs=1e-6) and m["rewards/margins"] == 0.0


def test_heldout_answers_give_a_greedy_accuracy(tiny_dir, tmp_path):
    cfg = load_config(overrides=FAST + ["stage=sft", "data.task=null", f"data.path={DATA / 'sft.jsonl'}", f"model.name={tiny_dir}",
                                        f"logging.output_dir={tmp_path}", "train.steps=1"])
    result = OfflineTrainer(cfg).evaluate("before")
    assert result["heldout"]["accuracy"] in (0.0, 1.0) and result["heldout"]["n"] == 1.0  # 10 prompts, 10% held out
    assert "accuracy" not in result["train"]


def test_encoding_follows_trl_and_the_grpo_prompt_rendering():
    tok = tiny_tokenizer()
    rows = [
        {"prompt": "What is 3 + 4?", "chosen": "7", "rejected": "8"},
        {"prompt": [{"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", "content": "Hello."}],
         "rejected": [{"role": "assistant", "content": "Go."}]},
    ]
    ex = encode(tok, rows, "dpo", system_prompt="Be brief.", eos_id=2, max_prompt_tokens=512, max_completion_tokens=512)
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)  # noqa: E731
    # the prompt is the chat template with the generation prompt, the system prompt first (as GRPO prompts)
    assert decode(ex[0].prompt_ids) == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    assert [decode(c) for c in ex[0].completions] == ["7<|im_end|>", "8<|im_end|>"]  # a string completion + the stop token
    # a conversational completion is what the template renders after the prompt
    assert decode(ex[1].prompt_ids).endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert [decode(c) for c in ex[1].completions] == ["Hello.<|im_end|>\n", "Go.<|im_end|>\n"]
    short = encode(tok, rows[:1], "dpo", system_prompt=None, eos_id=2, max_prompt_tokens=4, max_completion_tokens=1)
    assert decode(short[0].prompt_ids) == "ant\n" and short[0].completions == [[ex[0].completions[0][0]], [ex[0].completions[1][0]]]


def test_kto_takes_a_preference_dataset_unpaired(tmp_path):
    splits = load_offline_splits(DataConfig(task=None, path=str(DATA / "dpo.jsonl"), heldout_fraction=0.0), "kto")
    # 10 pairs -> 20 rows: each prompt's chosen completion desirable, its rejected one undesirable
    assert len(splits.train) == 20 and not splits.heldout
    by_prompt = {}
    for row in splits.train:
        by_prompt.setdefault(row["prompt"], []).append((row["completion"], row["label"]))
    assert by_prompt["What is 3 + 4?"] == [("3 + 4 = 7", True), ("3 + 4 = 8", False)]


def test_kto_labels_from_csv_text(tmp_path):
    path = tmp_path / "kto.csv"
    path.write_text("prompt,completion,label\na,b,true\nc,d,0\n")
    rows = load_offline_splits(DataConfig(task=None, path=str(path), heldout_fraction=0.0), "kto").train
    assert sorted(r["label"] for r in rows) == [False, True]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--stage", "dpo", "--set", f"data.path={DATA / 'sft.jsonl'}"], "has no column 'chosen'"),
        (["--stage", "kto", "--set", f"data.path={DATA / 'sft.jsonl'}"], "{prompt, completion, label}"),
        (["--stage", "rl"], "stage = 'rl' is not allowed; choose one of: grpo, sft, dpo, kto"),
        (["--stage", "dpo"], "stage 'dpo' trains on a dataset file: set data.path"),
        (["--stage", "kto", "--set", "offline.loss=dpo", "--set", f"data.path={DATA / 'kto.jsonl'}"], "offline.loss 'dpo' trains on dpo data but stage is 'kto'"),
        (["--stage", "kto", "--set", "offline.batch_size=1", "--set", f"data.path={DATA / 'kto.jsonl'}"], "offline.batch_size must be >= 2"),
        (["--stage", "dpo", "--set", "offline.loss=humanline_dpo", "--set", "offline.loss_options={log_eps_p: 0.5}"], "log_eps_p < 0 < log_eps_r"),
        (["--stage", "dpo", "--set", "offline.loss_options={gamma: 1}"], "['gamma'] is not an option of offline_loss 'dpo'"),
        (["--stage", "sft", "--set", "offline.ref_sync_every=1"], "offline.loss 'sft' uses no reference model"),
        (["--stage", "dpo", "--set", "algorithm.beta=0.1", "--set", f"data.path={DATA / 'dpo_chat.jsonl'}"],
         "algorithm.beta is set, but stage 'dpo' trains the offline objective"),  # DPO's beta is offline.beta
        (["--stage", "kto", "--set", "offline.loss=humanline_kto", "--set", "model.lora.enabled=true"], "offline.ref_sync_every needs a full fine-tune"),
    ],
)
def test_offline_user_errors_are_one_line(args, fragment, tiny_dir, tmp_path, capsys):
    assert main(["train", *args, "--set", f"model.name={tiny_dir}", "--set", f"logging.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1, err


def test_bad_kto_label_names_row_and_fix(tmp_path):
    path = tmp_path / "kto.jsonl"
    path.write_text(json.dumps({"prompt": "a", "completion": "b", "label": "maybe"}) + "\n")
    with pytest.raises(ValueError, match="row 0, column 'label' is 'maybe'; KTO labels are true"):
        load_offline_splits(DataConfig(task=None, path=str(path), heldout_fraction=0.0), "kto")


def test_the_grpo_trainer_refuses_an_offline_stage(tiny_cfg):
    from grpokit.trainer.loop import Trainer

    with pytest.raises(ValueError, match="stage 'sft' trains offline"):
        Trainer(tiny_cfg(stage="sft"))


def trainer_for(tiny_dir, tmp_path, stage, name, **overrides):
    data = {"sft": "sft.jsonl", "dpo": "dpo.jsonl", "kto": "kto.jsonl"}[stage]
    sets = FAST + [f"stage={stage}", "data.task=null", f"data.path={DATA / data}", f"model.name={tiny_dir}",
                   f"logging.output_dir={tmp_path / name}", "data.heldout_fraction=0.0"]
    return OfflineTrainer(load_config(overrides=sets + [f"{k}={v}" for k, v in overrides.items()]))


def gradient(trainer, examples):
    params = list(trainer.policy.trainable_parameters())
    allocate_gradients(params)
    trainer.objective(examples, learn=True)
    return torch.cat([p.grad.flatten() for p in params])


@pytest.mark.parametrize("stage,loss", [("sft", "sft"), ("dpo", "dpo"), ("kto", "kto"), ("kto", "humanline_kto")])
def test_gradient_is_the_same_micro_batched_and_with_streambp(stage, loss, tiny_dir, tmp_path):
    # one forward over the whole batch = micro-batches of 2 sequences = StreamBP chunks of 2 tokens
    whole = trainer_for(tiny_dir, tmp_path, stage, "a", **{"train.micro_batch_size": 32, "offline.loss": loss})
    examples = whole.train_examples[:6]
    reference = gradient(whole, examples)
    micro = gradient(trainer_for(tiny_dir, tmp_path, stage, "b", **{"train.micro_batch_size": 2, "offline.loss": loss}), examples)
    streamed = gradient(trainer_for(tiny_dir, tmp_path, stage, "c", **{"train.sequence_chunk": 2, "offline.loss": loss}), examples)
    assert reference.abs().max() > 0
    assert torch.allclose(micro, reference, atol=1e-6, rtol=1e-4)
    assert torch.allclose(streamed, reference, atol=1e-6, rtol=1e-4)
    scale = reference.abs().max()  # StreamBP "exact up to float summation order" (arXiv 2506.03077): within 1e-5
    assert (streamed - reference).abs().max() / scale < 1e-5 and (micro - reference).abs().max() / scale < 1e-5


def test_reference_sync_takes_the_pre_update_weights_every_k_steps(tiny_dir, tmp_path):
    trainer = trainer_for(tiny_dir, tmp_path, "dpo", "sync", **{"offline.loss": "humanline_dpo", "offline.ref_sync_every": 2,
                                                                 "optim.lr": 1.0e-3})
    ref, policy = trainer.policy.reference, trainer.model
    state = lambda m: {k: v.clone() for k, v in m.state_dict().items()}  # noqa: E731
    initial = state(policy)
    trainer.train_step()  # step 1: 1 % 2 != 0, the reference stays the initial policy
    after_1 = state(policy)
    assert all(torch.equal(ref.state_dict()[k], initial[k]) for k in initial)
    trainer.train_step()  # step 2: the reference takes the weights step 2 started from, before its update
    assert all(torch.equal(ref.state_dict()[k], after_1[k]) for k in initial)
    assert not all(torch.equal(policy.state_dict()[k], after_1[k]) for k in initial)


def test_resume_continues_exactly_with_a_synced_reference(tiny_dir, tmp_path):
    common = {"offline.loss": "humanline_dpo", "optim.lr": 1.0e-3, "logging.checkpoint_every": 2, "offline.batch_size": 4,
              "eval.before": "false", "eval.after": "false"}
    whole = trainer_for(tiny_dir, tmp_path, "dpo", "whole", **common, **{"train.steps": 4})
    whole.train()
    first = trainer_for(tiny_dir, tmp_path, "dpo", "part", **common, **{"train.steps": 2})
    first.train()
    resumed = trainer_for(tiny_dir, tmp_path, "dpo", "part", **common, **{"train.steps": 4})
    resumed.train(resume=True)
    for a, b in ((whole.model, resumed.model), (whole.policy.reference, resumed.policy.reference)):
        sa, sb = a.state_dict(), b.state_dict()
        assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)
    losses = lambda t: [json.loads(l)["loss"] for l in (t.run_dir / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert losses(resumed) == pytest.approx(losses(whole), abs=1e-6)
