"""FlowMatchingPolicy on a tiny random UNet2DModel: replay ratio 1, CFG gradient, shared noise, a policy-gradient step, load-time checks."""

import sys

import pytest
import torch

from grpokit.config.loading import load_config
from grpokit.families.flow_matching.model import TinyFlowModel, guided_velocity, unet_config
from grpokit.families.flow_matching.procedural import NUM_CLASSES, flow_images
from grpokit.families.flow_matching.policy import FlowMatchingPolicy, FlowSettings
from grpokit.rollout.types import SamplingParams
from grpokit.trainer.inputs import RunContractError, check_run



@pytest.fixture(autouse=True)
def one_thread():
    """Tiny convolutions: one thread is faster than two, and far faster on a loaded machine [measured: 40 ms vs 1.6 s]."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

def tiny_model(seed: int = 0) -> TinyFlowModel:
    torch.manual_seed(seed)
    return TinyFlowModel(unet_config(8, NUM_CLASSES, (8, 16)), [str(i) for i in range(NUM_CLASSES)])


ROWS = flow_images(0, 4, 0).train


@pytest.mark.parametrize("order,guidance", [("first", 1.0), ("random", 3.0)])
def test_rescoring_the_stored_steps_gives_ratio_one(order, guidance):
    policy = FlowMatchingPolicy(tiny_model(), FlowSettings(steps=6, train_fraction=0.5, train_order=order, guidance=guidance))
    batch = policy.sample([r["prompt"] for r in ROWS], ROWS, 3, SamplingParams())
    assert batch.completion_ids.shape == (12, 3) and batch.states.shape == (12, 7, 3, 8, 8)
    for rows in (slice(0, 12), slice(0, 5), slice(5, 12)):  # any micro-batching replays the same numbers
        mb = batch.select(rows)
        ratio = torch.exp(policy.score(mb) - mb.sampling_logp)
        torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-5)
    fwd = policy.learn_forward(batch, with_entropy=False, entropy_grad=False)
    assert fwd.logp.requires_grad
    torch.testing.assert_close(fwd.logp.detach(), batch.sampling_logp, rtol=0, atol=1e-5)


def test_the_unconditional_cfg_branch_gets_no_gradient():
    model = tiny_model(1)
    x, sigma = torch.randn(4, 3, 8, 8), torch.full((4,), 0.6)
    labels = torch.tensor([0, 1, 2, 3])
    w = torch.randn(4, 3, 8, 8)
    (w * guided_velocity(model, x, sigma, labels, 3.0, model.null_class)).sum().backward()
    guided = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (w * model(x, sigma, labels)).sum().backward()  # v = v_u + 3(v_c − v_u) with v_u detached: ∇ = 3·∇v_c
    scale = max(float(p.grad.abs().max()) for p in model.parameters())  # biases before a GroupNorm have ~0 (float-noise) gradients
    for g, p in zip(guided, model.parameters()):
        torch.testing.assert_close(g, 3.0 * p.grad, rtol=1e-4, atol=1e-4 * scale)
    emb = model.unet.class_embedding.weight  # the null-class embedding row is only used by the detached branch
    assert float(guided[[i for i, p in enumerate(model.parameters()) if p is emb][0]][model.null_class].abs().sum()) == 0.0


def test_same_noise_groups_share_their_initial_state():
    shared = FlowMatchingPolicy(tiny_model(), FlowSettings(steps=3, same_noise=True))
    batch = shared.sample([r["prompt"] for r in ROWS[:2]], ROWS[:2], 4, SamplingParams())
    x0 = batch.states[:, 0]
    assert torch.equal(x0[0], x0[3]) and not torch.equal(x0[0], x0[4])
    assert not torch.equal(batch.states[0, -1], batch.states[1, -1])  # the SDE noise still differs
    own = FlowMatchingPolicy(tiny_model(), FlowSettings(steps=3)).sample([ROWS[0]["prompt"]], ROWS[:1], 4, SamplingParams())
    assert not torch.equal(own.states[0, 0], own.states[1, 0])


def test_evaluation_is_a_seeded_ode_with_eval_steps():
    policy = FlowMatchingPolicy(tiny_model(), FlowSettings(steps=4, eval_steps=5))
    a = policy.sample(["x"] * 2, ROWS[:2], 1, SamplingParams(greedy=True))
    policy.begin_step(7)  # another training step: held-out images do not depend on it
    b = policy.sample(["x"] * 2, ROWS[:2], 1, SamplingParams(greedy=True))
    assert a.states.shape[1] == 6 and torch.equal(a.states, b.states)
    assert int(a.completion_mask.sum()) == 0  # the ODE has no trainable unit
    assert a.completions[0].pixels.shape == (8, 8, 3)


def test_a_policy_gradient_step_raises_the_logprob_of_positive_advantage_steps():
    policy = FlowMatchingPolicy(tiny_model(2), FlowSettings(steps=4, train_fraction=1.0))
    batch = policy.sample(["x"] * 4, ROWS, 2, SamplingParams())
    adv = torch.tensor([1.0, -1.0] * 4)[:, None]  # [B, 1]
    opt = torch.optim.SGD(policy.module.parameters(), lr=1e-3)
    fwd = policy.learn_forward(batch, with_entropy=False, entropy_grad=False)
    fwd.backward(-(adv * fwd.logp).mean())
    opt.step()
    change = policy.score(batch) - batch.sampling_logp  # [B, U]
    assert float((adv * change).sum()) > 0


def _cfg(tmp_path, *overrides):
    from grpokit.families.flow_matching.pretrain import build

    folder = build(tmp_path / "flow", steps=0, channels=(8, 16))
    return load_config(preset="flow_grpo", overrides=[f"model.name={folder}", *overrides])


def test_without_diffusers_a_flow_run_is_one_install_line(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    monkeypatch.setitem(sys.modules, "diffusers", None)  # `import diffusers` now raises ImportError
    with pytest.raises(RunContractError) as err:
        check_run(cfg)
    assert "pip install 'grpokit[diffusion]'" in str(err.value) and "\n" not in str(err.value)
    cfg.model.name = "tiny-flow"  # the embedded name too, before anything is built
    with pytest.raises(RunContractError, match=r"grpokit\[diffusion\]"):
        check_run(cfg)


@pytest.mark.parametrize("override,field", [("algorithm.beta=0.04", "algorithm.beta"), ("algorithm.loss=papo", "aux_logp"),
                                            ("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling")])
def test_what_the_flow_policy_cannot_do_is_refused_at_load(tmp_path, override, field):
    with pytest.raises(RunContractError, match=field):
        check_run(_cfg(tmp_path, override))


def test_the_presets_load_and_pass_the_checks():
    for name in ("flow_grpo", "pref_grpo_image", "dpp_grpo_image"):
        cfg = load_config(preset=name)
        check_run(cfg)
        assert cfg.model.name == "tiny-flow" and cfg.algorithm.epsilon_low == 1e-4
