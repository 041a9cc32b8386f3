"""TPSFT: the trust-region SFT objective (EtCon, arXiv 2512.04753) and the FFN-window editor."""

import json
import math

import pytest
import torch

from grpokit.algos.offline import OFFLINE_LOSSES, OfflineInputs
from grpokit.editing.editor import EditConfig, apply_edits, encode_edit, select_window, token_logp
from grpokit.editing.facts import make_facts
from grpokit.editing.tpsft import tpsft_token_loss
from grpokit.testing import tiny_model_and_tokenizer


def test_at_theta_old_loss_is_minus_one_per_token_and_gradient_is_sft():
    logp = torch.tensor([[-0.5, -2.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = tpsft_token_loss(logp, logp.detach(), mask, 0.2)
    # r = exp(0) = 1 on every token: -min(1, clip(1)) = -1 on the two target tokens, 0 on the masked one
    assert loss.tolist() == [[-1.0, -1.0, 0.0]]
    (loss.sum() / 2).backward()
    sft = logp.detach().clone().requires_grad_(True)
    (-(sft * mask).sum() / 2).backward()  # SFT: d/dlogp of -(1/N) sum m logp = -m / N
    assert torch.equal(logp.grad, sft.grad)
    assert logp.grad.tolist() == [[-0.5, -0.5, 0.0]]


def test_token_past_one_plus_epsilon_gets_exactly_zero_gradient():
    old = torch.log(torch.tensor([[0.1, 0.1, 0.1]]))
    # probabilities 0.13 (r = 1.3 > 1.2), 0.11 (r = 1.1) and 0.05 (r = 0.5 < 1 - eps: not clipped, A > 0)
    logp = torch.log(torch.tensor([[0.13, 0.11, 0.05]])).requires_grad_(True)
    loss = tpsft_token_loss(logp, old, torch.ones(1, 3), 0.2)
    assert loss[0, 0].item() == pytest.approx(-1.2)  # the clipped constant 1 + eps
    loss.sum().backward()
    # d(-r)/dlogp = -r: 0 for the clipped token, -1.1 and -0.5 for the others
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1:].tolist() == pytest.approx([-1.1, -0.5])


def test_registered_offline_loss_tpsft_normalises_by_step_tokens():
    spec = OFFLINE_LOSSES.spec("tpsft")
    assert spec.stage == "sft" and spec.inputs == ("logp", "ref_logp", "mask")
    logp = torch.log(torch.tensor([[0.5, 0.13]]))
    inp = OfflineInputs(logp=logp, ref_logp=torch.log(torch.tensor([[0.5, 0.1]])), mask=torch.ones(1, 2))
    loss, metrics = spec.fn(inp, num_tokens=4.0, epsilon=0.2)
    assert loss.item() == pytest.approx(-(1.0 + 1.2) / 4)  # r = 1 and r = 1.3 -> 1.2
    assert metrics["clipped"].item() == pytest.approx(0.5)
    assert metrics["ratio"].item() == pytest.approx((1.0 + 1.3) / 2)
    with pytest.raises(ValueError, match="epsilon"):
        tpsft_token_loss(logp, logp, torch.ones(1, 2), 0.0)


def test_only_the_ffn_window_receives_gradient():
    model, tok = tiny_model_and_tokenizer(layers=3)
    params = select_window(model, [1], "mlp.down_proj")
    ids, mask = encode_edit(tok, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n", "ab")
    (-token_logp(model, ids, mask).sum()).backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad == {"model.layers.1.mlp.down_proj.weight"} and params[0].grad.abs().sum() > 0
    # the target: "ab" + EOS, three tokens at the end
    assert mask.sum().item() == 3 and mask[0, -3:].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="out of range"):
        select_window(model, [3], "mlp.down_proj")
    with pytest.raises(ValueError, match="edit.module"):
        select_window(model, [0], "mlp.nope")


def test_sequential_edits_change_only_the_window_and_raise_the_target():
    model, tok = tiny_model_and_tokenizer(layers=3, hidden=32)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    edits = make_facts(2, seed=0)
    prompts = [f"<|im_start|>user\n{e.prompt}<|im_end|>\n<|im_start|>assistant\n" for e in edits]
    rows = apply_edits(model, tok, edits, prompts, EditConfig(method="sft", layers=[2], steps=15, lr=1e-2), progress=False)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"model.layers.2.mlp.down_proj.weight"}
    assert all(r["p_after"] > r["p_before"] for r in rows)
    assert all(p.requires_grad for p in model.parameters())  # the model is handed back trainable


def test_tpsft_single_snapshot_caps_the_growth_of_each_edit():
    model, tok = tiny_model_and_tokenizer(layers=3, hidden=32)
    edits = make_facts(1, seed=0)
    prompt = [f"<|im_start|>user\n{edits[0].prompt}<|im_end|>\n<|im_start|>assistant\n"]
    rows = apply_edits(model, tok, edits, prompt, EditConfig(method="tpsft", layers=[2], steps=40, lr=1e-2, epsilon=0.2, refresh_every=0), progress=False)
    # one snapshot: tokens stop receiving gradient past r = 1.2 (a step may overshoot once), so the
    # target's mean probability grows far less than SFT's with the same 40 steps
    assert rows[0]["p_after"] > rows[0]["p_before"]
    sft, _ = tiny_model_and_tokenizer(layers=3, hidden=32)
    ref = apply_edits(sft, tok, edits, prompt, EditConfig(method="sft", layers=[2], steps=40, lr=1e-2), progress=False)
    assert rows[0]["p_after"] / rows[0]["p_before"] < ref[0]["p_after"] / ref[0]["p_before"]
    assert math.isfinite(rows[0]["ratio"])


def test_edit_config_refuses_bad_values():
    for bad in (EditConfig(method="rome"), EditConfig(anchor="x"), EditConfig(steps=0), EditConfig(layers=[])):
        with pytest.raises(ValueError, match="edit"):
            bad.validate()


def test_tpsft_as_an_offline_stage_starts_at_minus_one_and_descends(tmp_path):
    from pathlib import Path

    from grpokit.cli import main
    from grpokit.testing import save_tiny_model

    data = Path(__file__).resolve().parents[2] / "examples" / "offline" / "sft.jsonl"
    run = tmp_path / "run"
    sets = ["data.task=null", f"data.path={data}", f"model.name={save_tiny_model(tmp_path / 'tiny')}", "offline.loss=tpsft",
            f"logging.output_dir={run}", "logging.progress=false", "train.steps=4", "optim.lr=1.0e-3", "eval.max_new_tokens=4"]
    assert main(["train", "--stage", "sft", *[x for s in sets for x in ("--set", s)]]) == 0
    rows = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    train = {r["label"]: r for r in rows if r["split"] == "train"}
    # the reference is the starting model: r = 1 on every token before training, loss = -1 exactly
    assert train["before"]["loss"] == pytest.approx(-1.0, abs=1e-6)
    assert train["after"]["loss"] < -1.0


def test_tpsft_waits_for_the_refresh_when_every_target_token_is_clipped():
    """An update that overshoots 1 + eps on every target token zeroes the gradient until pi_old is refreshed: the
    edit skips those steps and goes on after the refresh (PSFT's next iteration) instead of ending there."""
    edits = make_facts(1, seed=0)
    prompt = [f"<|im_start|>user\n{edits[0].prompt}<|im_end|>\n<|im_start|>assistant\n"]
    rows = {}
    for refresh in (2, 0):
        model, tok = tiny_model_and_tokenizer(layers=3, hidden=32)
        cfg = EditConfig(method="tpsft", layers=[2], steps=6, lr=0.3, refresh_every=refresh, max_grad_norm=0)
        rows[refresh] = apply_edits(model, tok, edits, prompt, cfg, progress=False)[0]
    # one snapshot: the first update takes every target token past r = 1.2 and no refresh is left, so the edit ends
    assert rows[0]["updates"] == 1 and rows[0]["clipped"] == 1.0
    # refreshed every 2 steps: step 1 is all clipped and skipped, steps 2-5 update after the refresh (measured 5)
    assert 1 < rows[2]["updates"] < 6
    assert rows[2]["p_after"] > rows[0]["p_after"]
