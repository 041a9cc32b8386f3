"""The vision-language family on a tiny random Qwen2-VL: processing, rollout, scoring, PAPO's masked image."""

import random

import pytest
import torch

from grpokit.algos.papo import perception_kl
from grpokit.rollout.types import SamplingParams
from grpokit.families.vision_lm.procedural import blacken_patches, image_question, shapes_image, video_question


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    from grpokit.families.vision_lm.policy import VisionLMPolicy
    from grpokit.families.vision_lm.loading import load_vision_model
    from grpokit.families.vision_lm.tiny_qwen2vl import save_tiny_qwen2vl

    folder = save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_vlm"), seed=0)
    model, tok, proc = load_vision_model(folder)
    return folder, VisionLMPolicy(model, tok, proc)


def image_rows(n=3, seed=0):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        image, question, answer = image_question(("colour", "count", "shape")[i % 3], rng)
        rows.append({"prompt": question, "images": [image], "answer": answer})
    return rows


def test_the_image_pad_expands_to_grid_over_merge_squared_tokens(vlm):
    _, policy = vlm
    proc = policy.processor
    text = policy.render(image_rows(1), None)[0]
    assert text.count("<|image_pad|>") == 1 and "<|vision_start|><|image_pad|><|vision_end|>" in text
    for size in (56, 84, 112):  # 4x4, 6x6, 8x8 patches of 14 px
        enc = proc.encode(text, [shapes_image("red", "square", 2, random.Random(0), size)])
        t, h, w = enc.image_grid_thw[0].tolist()
        assert (t, h, w) == (1, size // 14, size // 14)
        assert enc.input_ids.count(proc.image_token_id) == t * h * w // proc.merge**2
        assert enc.pixel_values.shape == (t * h * w, 3 * 2 * 14 * 14)
        assert enc.mm_token_type_ids.count(1) == t * h * w // 4


def test_a_video_of_two_identical_frames_gives_the_image_processors_rows(vlm):
    _, policy = vlm
    image = shapes_image("blue", "circle", 3, random.Random(1))
    rows, grid = policy.processor.video_rows([image, image])
    still, still_grid = policy.processor.image_rows([image])
    assert torch.equal(rows, still) and torch.equal(grid, still_grid)
    frames, _, _ = video_question("motion", random.Random(0))
    rows4, grid4 = policy.processor.video_rows(frames)
    assert grid4.tolist() == [[2, 4, 4]] and rows4.shape[0] == 32


def test_a_masked_image_keeps_size_ids_and_grid_and_changes_pixels(vlm):
    _, policy = vlm
    image = shapes_image("green", "square", 4, random.Random(2))
    masked = blacken_patches(image, 14, 0.6, random.Random(0))
    assert masked.size == image.size and masked.tobytes() != image.tobytes()
    assert blacken_patches(image, 14, 0.0, random.Random(0)).tobytes() == image.tobytes()
    text = policy.render([{"prompt": "q", "images": [image]}], None)[0]
    a, b = policy.processor.encode(text, [image]), policy.processor.encode(text, [masked])
    assert a.input_ids == b.input_ids and torch.equal(a.image_grid_thw, b.image_grid_thw)
    assert not torch.equal(a.pixel_values, b.pixel_values)


def sampled(policy, rows, group=3, seed=0):
    torch.manual_seed(seed)
    return policy.sample(policy.render(rows, None), rows, group, SamplingParams(max_new_tokens=4, temperature=1.0))


def test_learner_log_probs_never_exceed_the_renormalised_samplers_and_do_not_depend_on_slicing(vlm):
    _, policy = vlm
    rows = image_rows(3) + [{"prompt": "What colour are the shapes?", "answer": "red"}]  # a text-only row too
    batch = sampled(policy, rows)
    full = policy.score(batch)
    mask = batch.completion_mask.bool()
    # the sampler renormalises over the tokens it may draw (never a vision placeholder): never below the full softmax
    assert bool((batch.sampling_logp[mask] >= full[mask] - 1e-5).all())
    pieces = torch.cat([policy.score(batch.select(torch.arange(s, min(s + 5, len(batch))))) for s in range(0, len(batch), 5)])
    assert torch.allclose(pieces, full, atol=1e-6)


def test_the_sampler_records_the_log_probs_of_the_distribution_it_drew_from(vlm):
    _, policy = vlm
    rows = image_rows(2)
    batch = sampled(policy, rows, group=2, seed=1)
    never = policy.backend.never_sampled
    with torch.no_grad():
        for i in range(len(batch)):
            n = int(batch.completion_mask[i].sum())
            for t in range(n):
                sub = batch.select(torch.tensor([i]))
                logits = _next_logits(policy, sub, t)
                allowed = logits.clone()
                allowed[never] = float("-inf")
                want = torch.log_softmax(allowed, -1)[batch.completion_ids[i, t]]
                assert abs(float(want) - float(batch.sampling_logp[i, t])) < 1e-4


def _next_logits(policy, sub, t):
    """Full-vocabulary logits for completion position t of a one-row batch, from one plain forward."""
    from grpokit.families.vision_lm.policy import base_model

    base = base_model(policy.module)
    pixels = policy._inputs(sub, None)
    ids = torch.cat([sub.prompt_ids, sub.completion_ids[:, :t]], 1)
    mask = torch.cat([sub.prompt_mask, sub.completion_mask[:, :t]], 1)
    types = torch.zeros_like(ids)
    types[ids == policy.processor.image_token_id] = 1
    pos, _ = base.model.get_rope_index(ids, types, pixels.get("image_grid_thw"), None, mask)
    out = policy.module(input_ids=ids, attention_mask=mask, position_ids=pos, mm_token_type_ids=types, **pixels)
    return out.logits[0, -1].float()


def test_the_perception_kl_is_zero_at_mask_probability_zero_and_for_text_only_rows(vlm):
    _, policy = vlm
    rows = image_rows(2) + [{"prompt": "How many shapes are there?", "answer": "two"}]
    batch = sampled(policy, rows, group=2, seed=2)
    plain = policy.score(batch)
    policy.mask_probability = 0.0
    try:
        unmasked = policy.score(batch, condition="masked")
    finally:
        policy.mask_probability = 0.6
    mask = batch.completion_mask.bool()
    assert torch.allclose(unmasked, plain, atol=1e-6)
    assert float(perception_kl(plain, unmasked)[mask].abs().max()) < 1e-6
    masked = policy.score(batch, condition="masked")
    text_rows = torch.tensor([r.get("images") is None for r in batch.rows])
    assert torch.equal(masked[text_rows], plain[text_rows])  # no image: no perception term
    kappa = perception_kl(plain, masked) * mask
    assert float(kappa[~text_rows].sum()) > 0  # the masked image changed the log-probs of image rows


def test_the_learner_forward_reaches_the_vision_tower(vlm):
    _, policy = vlm
    batch = sampled(policy, image_rows(2), group=2, seed=3)
    policy.module.zero_grad(set_to_none=True)
    fwd = policy.learn_forward(batch, with_entropy=True, entropy_grad=False)
    assert fwd.entropy is not None and fwd.logp.shape == batch.completion_ids.shape
    fwd.backward(-(fwd.logp * batch.completion_mask).sum())
    vision_grads = [p.grad for n, p in policy.module.named_parameters() if "visual" in n]
    assert any(g is not None and float(g.abs().sum()) > 0 for g in vision_grads)
    policy.module.zero_grad(set_to_none=True)


def test_with_lora_the_reference_is_the_base_weights_so_the_kl_grows_after_an_update(tmp_path):
    """LoRA + beta > 0: the reference is the adapter-off model (peft's disable_adapter), not the trained one.

    Before the fix the reference role scored the adapter-on module itself, so KL(pi || pi_ref) was
    exactly 0 at every step. LoRA's B starts at 0, so the two agree before the update; after one
    update the reference must still equal a frozen copy of the base weights and the k3 KL be > 0.
    """
    import copy

    from grpokit.algos.kl import kl_k3
    from grpokit.config.schema import LoraConfig
    from grpokit.model.lora import apply_lora
    from grpokit.families.vision_lm.policy import VisionLMPolicy
    from grpokit.families.vision_lm.loading import load_vision_model
    from grpokit.families.vision_lm.tiny_qwen2vl import save_tiny_qwen2vl

    model, tok, proc = load_vision_model(save_tiny_qwen2vl(tmp_path, seed=0))
    frozen = VisionLMPolicy(copy.deepcopy(model).eval(), tok, proc)
    policy = VisionLMPolicy(apply_lora(model, LoraConfig(enabled=True, r=4, target_modules=["q_proj", "v_proj"])), tok, proc)
    assert policy.reference is None  # LoRA: no copy, the adapter is disabled instead
    batch = sampled(policy, image_rows(2), group=2, seed=4)
    mask = batch.completion_mask.to(torch.float32)
    assert torch.allclose(policy.score(batch, "reference"), policy.score(batch), atol=1e-6)  # B = 0: adapter is a no-op
    optimizer = torch.optim.SGD([p for p in policy.module.parameters() if p.requires_grad], lr=1.0)
    fwd = policy.learn_forward(batch, with_entropy=False, entropy_grad=False)
    fwd.backward(-(fwd.logp * mask).sum() / mask.sum())
    optimizer.step()
    ref, current, base = policy.score(batch, "reference"), policy.score(batch), frozen.score(batch)
    assert torch.allclose(ref, base, atol=1e-6)  # the reference is the base weights, after the update too
    kl = float((kl_k3(current, ref) * mask).sum() / mask.sum())
    kl_base = float((kl_k3(current, base) * mask).sum() / mask.sum())
    assert kl > 1e-4 and abs(kl - kl_base) < 1e-6
