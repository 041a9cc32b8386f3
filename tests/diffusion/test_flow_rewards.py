"""Image rewards, Pref-GRPO's pairwise judge through win_rate, DPP over image embeddings, the flow_images task."""

import math
import random

import numpy as np
import pytest
import torch

from grpokit.algos.advantages import ADVANTAGES
from grpokit.families.flow_matching.procedural import class_id, draw_image, flow_images, noisy_prior_batch
from grpokit.families.flow_matching.rewards import GeneratedImage, components, image_embed, image_judge
from grpokit.rewards import resolve_reward

RED, BLUE = (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)


def img(cells: dict) -> GeneratedImage:
    """A 4×4 image on black with ``{(row, col): rgb}`` pixels lit."""
    pixels = np.zeros((4, 4, 3), dtype=np.float32)
    for (r, c), rgb in cells.items():
        pixels[r, c] = rgb
    return GeneratedImage(pixels)


def test_colour_fraction_and_component_count_by_hand():
    # 3 red pixels (two touching, one apart) and 1 blue: red fraction 3/4, red components 2
    im = img({(0, 0): RED, (0, 1): RED, (3, 3): RED, (2, 0): BLUE})
    colour_fraction = resolve_reward("colour_fraction")
    assert colour_fraction([""], [im], colour=["red"]) == [0.75]
    assert colour_fraction([""], [img({})], colour=["red"]) == [0.0]  # nothing lit
    component_count = resolve_reward("component_count")
    assert component_count([""] * 2, [im, im], colour=["red", "red"], count=[2, 1]) == [1.0, 0.5]  # 1/(1+|2-1|)
    assert components(np.eye(3, dtype=bool)) == 3  # diagonal neighbours are not 4-connected


def test_jpeg_compressibility_prefers_the_flat_image():
    noisy = GeneratedImage(np.random.default_rng(0).random((8, 8, 3)).astype(np.float32))
    flat = GeneratedImage(np.zeros((8, 8, 3), dtype=np.float32))
    flat_score, noisy_score = resolve_reward("jpeg_compressibility")(["", ""], [flat, noisy])
    assert flat_score > noisy_score and flat_score < 0  # minus kilobytes


def test_text_completions_get_a_clear_error():
    with pytest.raises(ValueError, match="flow-matching image policy"):
        resolve_reward("colour_fraction")(["p"], ["a text"], colour=["red"])


def test_image_judge_calls_ties_within_the_margin():
    a, b = img({(0, 0): RED}), img({(0, 0): RED, (1, 1): BLUE})  # red fractions 1.0 and 0.5
    assert image_judge("", a, b, colour="red", tie_margin=0.1) == 1.0
    assert image_judge("", b, a, colour="red", tie_margin=0.1) == 0.0
    assert image_judge("", a, b, colour="red", tie_margin=0.6) == 0.5


def test_brightness_bias_enters_the_pointwise_score_and_the_judge_alike():
    # equal red fraction (1.0); the second image's red is brighter: mean pixel 1/48 vs 0.5/48
    dim, bright = img({(0, 0): (0.5, 0.0, 0.0)}), img({(0, 0): RED})
    tiny = resolve_reward("tiny_score")
    s_dim, s_bright = tiny(["", ""], [dim, bright], colour=["red"] * 2, offset=0.5, scale=0.01, brightness=2.0)
    assert s_dim == pytest.approx(0.5 + 0.01 * (1.0 + 2.0 * 0.5 / 48))
    assert s_bright - s_dim == pytest.approx(0.01 * 2.0 * 0.5 / 48)  # the bias alone ranks them
    assert tiny(["", ""], [dim, bright], colour=["red"] * 2)[0] == tiny(["", ""], [dim, bright], colour=["red"] * 2)[1]  # no bias: a tie
    # the judge sees the same hidden score: a margin above the bias's 0.0208 calls a tie, one below it does not
    assert image_judge("", bright, dim, colour="red", tie_margin=0.05, brightness=2.0) == 0.5
    assert image_judge("", bright, dim, colour="red", tie_margin=0.01, brightness=2.0) == 1.0


def test_win_rate_with_the_image_judge_strict_order_and_illusory_advantage():
    win_rate = resolve_reward("win_rate")
    judge = "grpokit.families.flow_matching.rewards:image_judge"
    # red fractions 1, 3/4, 1/2, 1/4 -> strict order -> w = (1, 2/3, 1/3, 0)
    group = [img({(0, c): RED for c in range(4 - k)} | {(3, c): BLUE for c in range(k)}) for k in range(4)]
    w = win_rate([""] * 4, group, group_ids=[0] * 4, prefer=judge, tie_margin=0.05, colour=["red"] * 4)
    assert w == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    assert sum(w) == pytest.approx(2.0)  # G/2
    # Pref-GRPO's "illusory advantage": pointwise scores 0.501, 0.500, 0.499 standardise to (1, 0, -1) ...
    grpo = ADVANTAGES.get("grpo")
    adv, _ = grpo(torch.tensor([0.501, 0.500, 0.499]), torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.0, -1.0]), atol=2e-3, rtol=0)
    # ... while a tiny_score with such tiny differences, judged pairwise with a margin, is all ties: w = 0.5, advantage 0
    near = [img({(0, 0): RED}), img({(0, 0): RED, (0, 1): RED}), img({(0, 0): RED, (3, 3): RED})]
    scores = resolve_reward("tiny_score")([""] * 3, near, colour=["red"] * 3, scale=0.01, noise=0.001)
    assert max(scores) - min(scores) < 0.01 and len(set(scores)) == 3
    w = win_rate([""] * 3, near, group_ids=[0] * 3, prefer=judge, tie_margin=0.05, colour=["red"] * 3)
    assert w == [0.5, 0.5, 0.5]


def test_dpp_over_image_embeddings_rewards_the_different_image():
    dpp = resolve_reward("dpp")
    a, b = img({(0, 0): RED}), img({(3, 3): BLUE, (2, 2): BLUE})
    kwargs = dict(embed="grpokit.families.flow_matching.rewards:image_embed", reference="group", lambda_div=1.0, lambda_rel=0.0)
    twins = dpp(["", ""], [a, a], group_ids=[0, 0], **kwargs)
    assert twins == pytest.approx([math.log(1.5)] * 2, abs=1e-6)  # an exact duplicate of R = {g}: log(2 − 1/2)
    mixed = dpp([""] * 3, [a, a, b], group_ids=[0, 0, 0], **kwargs)
    assert mixed[2] > mixed[0] and mixed[0] == pytest.approx(mixed[1])
    emb = image_embed([a, a, b])
    assert emb.shape == (3, 64) and torch.equal(emb[0], emb[1])


def test_flow_images_task_and_noisy_prior():
    splits = flow_images(0, 30, 24)
    assert [r["class_id"] for r in splits.heldout[:12]] == list(range(12))  # every condition, in order
    assert splits.heldout == flow_images(0, 5, 24).heldout  # held-out rows do not depend on n_train
    assert splits.heldout[0]["prompt"] == "one red square" and splits.heldout[0]["class_id"] == class_id("red", 1)
    image = draw_image("blue", 2, random.Random(0))
    assert components(image[:, :, 2] > 0.5) == 2
    images, labels = noisy_prior_batch(2000, random.Random(0), p_correct=0.5)
    right = np.mean([images[i][..., 0].max() > 0 for i in range(2000) if labels[i] // 2 == 0])  # red: the R channel lit
    assert 0.3 < right < 0.7  # red images are drawn red about half the time (the partner is green)
