"""Co-GRPO: the schedule policy's Gaussian, on-policy ratio 1, both parameter groups learn, zero-variance = Mask-GRPO."""

import math

import pytest
import torch

from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.losses import LossInputs, ppo_clip_loss
from grpokit.algos.objective import ObjectiveTerms, grpo_objective
from grpokit.config import load_config
from grpokit.families.palette.cogrpo import KNOBS, CoGRPOModel, Schedule, cosine_keep, sample_images
from grpokit.families.palette.policy import CoGRPOPolicy
from grpokit.families.masked_diffusion.likelihoods import CanvasInputs, mask_grpo_step_logp
from grpokit.families.masked_diffusion.model import save_mdm
from grpokit.families.palette.images import PaletteTokenizer, build_palette_predictor, palette_exact, palette_match, pattern, predictor_logits
from grpokit.rollout.types import SamplingParams

TOK = PaletteTokenizer()


def policy(std, knobs=KNOBS, seed=0):
    torch.manual_seed(seed)
    model = CoGRPOModel(build_palette_predictor(seed=seed, hidden=32, layers=1), Schedule(4, tuple(knobs), std=std))
    return CoGRPOPolicy(model, TOK, seed=seed)


def rows(n=3):
    return [{"prompt": f"class {i % 4}", "label": i % 4, "answer": str(i % 4)} for i in range(n)]


def test_schedule_starts_at_maskgits_cosine_and_its_log_prob_is_the_gaussian_closed_form():
    s = Schedule(4, KNOBS, std=0.5)
    v = Schedule.values(s.mean())
    # cos(pi/8) / 1, cos(pi/4) / cos(pi/8), cos(3pi/8) / cos(pi/4), then all committed
    assert torch.allclose(v["remask_ratio"][:3], torch.tensor([cosine_keep(k, 4) for k in range(3)]), atol=1e-5)
    assert cosine_keep(0, 4) == pytest.approx(math.cos(math.pi / 8))
    assert torch.allclose(v["temperature"], torch.ones(4), atol=1e-5) and torch.allclose(v["remask_temperature"], torch.full((4,), 4.5))
    z = s.sample(5, torch.Generator().manual_seed(0), True)
    expected = torch.distributions.Normal(s.mean()[None], 0.5).log_prob(z).sum(-1)
    assert torch.allclose(s.log_prob(z), expected, atol=1e-5)
    frozen = Schedule(4, ("temperature",), std=0.5)
    z = frozen.sample(3, torch.Generator().manual_seed(0), True)
    assert torch.equal(z[..., 0], frozen.mean()[None, :, 0].expand(3, -1))  # an unlearned knob never moves


def test_on_policy_ratio_is_one_both_groups_get_gradient_and_units_replay_the_sampler():
    pol = policy(0.3)
    batch = pol.sample([r["prompt"] for r in rows()], rows(), 2, SamplingParams(temperature=1.0))
    assert batch.unit_mask.sum(-1).tolist() == [8] * 6  # K token units + K schedule units
    old = pol.score(batch)
    assert torch.allclose(old, batch.sampling_logp, atol=1e-4)  # rescoring = what the sampler recorded
    fwd = pol.learn_forward(batch, with_entropy=False, entropy_grad=False)
    assert torch.equal(torch.exp(fwd.logp - old)[batch.unit_mask.bool()], torch.ones(48))
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0])
    inp = LossInputs(logp=fwd.logp, old_logp=old, adv=adv, mask=batch.unit_mask.float())
    loss, _ = grpo_objective(inp, ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("seq_mean_token_mean")))
    fwd.backward(loss)
    assert float(pol.module.schedule.raw.grad.abs().sum()) > 0
    assert sum(float(p.grad.abs().sum()) for p in pol.module.predictor.parameters() if p.grad is not None) > 0


def test_a_frozen_zero_variance_schedule_is_mask_grpo_on_the_same_steps():
    pol = policy(0.0, knobs=("remask_ratio", "temperature", "remask_temperature"))  # cfg off, std 0: deterministic
    for p in pol.module.schedule.parameters():
        p.requires_grad_(False)
    batch = pol.sample([r["prompt"] for r in rows()], rows(), 2, SamplingParams(temperature=1.0))
    assert batch.unit_mask.sum(-1).tolist() == [4] * 6  # only the K token units
    fwd = pol.learn_forward(batch, with_entropy=False, entropy_grad=False)
    pred = pol.module.predictor

    def logits_fn(ids, att):  # Mask-GRPO's forward on [class] + canvas
        out = predictor_logits(pred, ids[:, 0], ids[:, 1:])
        return torch.cat([out[:, :1], out], dim=1)

    temperature = float(Schedule.values(pol.module.schedule.mean())["temperature"][0])
    assert temperature == pytest.approx(1.0, abs=1e-5)
    inp = CanvasInputs(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.commit_step, batch.estimator_seeds, 4)
    ref, mask = mask_grpo_step_logp(logits_fn, inp, mask_id=TOK.mask_id, eos_id=-1, temperature=temperature)
    assert torch.equal(mask, batch.unit_mask)
    assert torch.allclose(fwd.logp, ref, atol=1e-5)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0])
    losses = []
    for logp in (fwd.logp, ref):
        inp = LossInputs(logp=logp, old_logp=logp.detach(), adv=adv, mask=mask.float())
        losses.append(grpo_objective(inp, ObjectiveTerms(ppo_clip_loss, AGGREGATIONS.get("seq_mean_token_mean")))[0])
    assert float(losses[0]) == pytest.approx(float(losses[1]), abs=1e-6)


def test_palette_rewards_and_greedy_sampling_by_hand():
    target = "".join(map(str, pattern(0)))
    assert target[:16] == "1111111122222222"  # class 0: horizontal stripes of colours 1 and 2
    partner = "".join(map(str, pattern(0, swap=True)))
    assert palette_match([], [target, partner, target[:32] + partner[32:]], label=[0, 0, 0]) == [1.0, 0.0, 0.5]
    assert palette_exact([], [target, partner], label=[0, 0]) == [1.0, 0.0]
    pol = policy(0.3)
    traj = sample_images(pol.module, torch.tensor([TOK.class_base] * 2), TOK, None, greedy=True)
    assert torch.equal(traj.canvas[0], traj.canvas[1]) and bool((traj.canvas < 8).all())


def test_co_grpo_preset_runs_and_moves_its_schedule(tmp_path):
    from grpokit.trainer.loop import Trainer

    folder = save_mdm(build_palette_predictor(hidden=32, layers=1), TOK, tmp_path / "pal")
    cfg = load_config(preset="co_grpo", overrides=[
        f"model.name={folder}", f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false", "data.n_train=8",
        "data.n_heldout=4", "rollout.group_size=4", "rollout.prompts_per_step=2", "train.steps=2", "train.max_minutes=0",
        "logging.checkpoint_every=0", "train.micro_batch_size=8", "eval.before=false", "eval.after=false", "diffusion.steps=4"])
    torch.manual_seed(0)
    tr = Trainer(cfg)
    assert type(tr.policy).__name__ == "CoGRPOPolicy"
    start = tr.model.schedule.mean().detach().clone()
    metrics = tr.train_step()
    assert "schedule/temperature" in metrics and metrics["learn/updates"] == 1
    assert not torch.equal(tr.model.schedule.mean().detach(), start)


def test_palette_classes_task_rows():
    from grpokit.data.tasks import TASKS

    splits = TASKS.get("palette_classes")(seed=0, n_train=40, n_heldout=8)
    assert len(splits.train) == 40 and {r["label"] for r in splits.train} == {0, 1, 2, 3}
    assert all(r["prompt"] == f"class {r['label']}" and TOK.class_token(r["prompt"]) == TOK.class_base + r["label"] for r in splits.train)
    with pytest.raises(ValueError, match="write 'class N'"):
        TOK.class_token("class 9")
