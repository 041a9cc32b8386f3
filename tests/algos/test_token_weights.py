import math

import pytest
import torch

from grpokit.registry import call_with

from grpokit.algos.advantages import grpo_advantage
from grpokit.algos.losses import LossInputs, ppo_clip_loss
from grpokit.algos.token_weights import TOKEN_WEIGHTS, entropy_band_penalty

A, B, C, D, E, PAD = 1, 2, 3, 4, 5, 0


def _toy_trie():
    # group 0 (rows 0, 2, 4): [a,b,c], [a,b,d], [a,e]; group 1 (rows 1, 3): [c,d,e], [d,c] (no sharing)
    ids = torch.tensor([[A, B, C], [C, D, E], [A, B, D], [D, C, PAD], [A, E, PAD]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0]], dtype=torch.float32)
    return ids, mask, torch.tensor([0, 1, 0, 1, 0])


@pytest.mark.parametrize("name", TOKEN_WEIGHTS.names())
def test_every_token_weighting_is_zero_off_mask_and_detached(name):
    ids, mask, g = _toy_trie()
    entropy = torch.rand(5, 3, requires_grad=True)
    options = {"rho": 0.5} if "rho" in TOKEN_WEIGHTS.option_names(name) else {}
    w, metrics = call_with(
        TOKEN_WEIGHTS.get(name), mask, options=options,
        context=dict(completion_ids=ids, group_ids=g, entropy=entropy, rewards=torch.tensor([1.0, 0, 0, 1, 1])),
    )
    assert w.shape == mask.shape and not w.requires_grad
    assert torch.equal(w[mask == 0], torch.zeros(int((mask == 0).sum())))
    assert all(isinstance(v, torch.Tensor) for v in metrics.values())


def test_all_is_the_mask():
    _, mask, _ = _toy_trie()
    w, _ = TOKEN_WEIGHTS.get("all")(mask.long())
    assert torch.equal(w, mask)


# ---------------------------------------------------------------- lambda_grpo


def test_lambda_grpo_toy_trie_weights():
    # toy group: [a,b,c], [a,b,d], [a,e] -> [[1/3, 1/2, 1], [1/3, 1/2, 1], [1/3, 1]]
    # ("a" is shared by all 3, "a b" by 2; group 1 shares nothing -> weights = mask)
    ids, mask, g = _toy_trie()
    w, m = TOKEN_WEIGHTS.get("lambda_grpo")(mask, completion_ids=ids, group_ids=g)
    expected = torch.tensor(
        [[1 / 3, 1 / 2, 1], [1, 1, 1], [1 / 3, 1 / 2, 1], [1, 1, 0], [1 / 3, 1, 0]], dtype=torch.float32
    )
    assert torch.allclose(w, expected)
    # 5 of the 13 valid tokens sit in a node with n > 1
    assert float(m["lambda/shared_frac"]) == pytest.approx(5 / 13)


def test_lambda_grpo_duplicates_and_pad_equal_to_eos():
    eos = 9
    # rows 0, 1 identical -> every token 1/2; row 2 = [7, 8] truncated and padded with the EOS id,
    # row 3 = [7, 8, EOS]: they split at position 2 although the ids agree there
    ids = torch.tensor([[7, 8, eos], [7, 8, eos], [7, 8, eos], [7, 8, eos]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]])
    w, _ = TOKEN_WEIGHTS.get("lambda_grpo")(mask, completion_ids=ids, group_ids=torch.tensor([0, 0, 1, 1]))
    assert torch.allclose(w, torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5, 0.5, 0.0], [0.5, 0.5, 1.0]]))


def test_lambda_grpo_node_coefficient_equals_node_advantage():
    # For every trie node λ: sum_{i in λ} w_it Â_i = (1/|λ|) sum_{i in λ} Â_i = Â(λ) (λ-GRPO, arXiv 2509.21154)
    torch.manual_seed(0)
    ids = torch.randint(0, 2, (6, 4))  # binary vocab -> many shared prefixes
    mask = torch.ones(6, 4)
    g = torch.zeros(6, dtype=torch.long)
    adv, _ = grpo_advantage(torch.rand(6), g)
    w, _ = TOKEN_WEIGHTS.get("lambda_grpo")(mask, completion_ids=ids, group_ids=g)
    for i in range(6):
        for t in range(4):
            node = [j for j in range(6) if torch.equal(ids[j, : t + 1], ids[i, : t + 1])]
            coef = sum(float(w[j, t] * adv[j]) for j in node)
            assert coef == pytest.approx(float(adv[node].mean()), abs=1e-6)
            assert float(w[i, t]) == pytest.approx(1 / len(node))


def test_lambda_grpo_needs_ids():
    with pytest.raises(ValueError, match="completion_ids"):
        TOKEN_WEIGHTS.get("lambda_grpo")(torch.ones(2, 2))


# ---------------------------------------------------------------- forking


def test_forking_hand_computed_batch_and_sequence_scope():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 0.3, 0.7], [0.95, 0.92, 0.6, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    # batch: 8 valid tokens, ceil(0.2 * 8) = 2 -> 0.95 and 0.92, both in row 1 (the 5.0s are padding)
    f, m = TOKEN_WEIGHTS.get("forking")(mask, entropy=entropy)
    assert torch.equal(f, torch.tensor([[0.0, 0, 0, 0, 0], [1.0, 1, 0, 0, 0]]))
    assert float(m["tokens/selected_frac"]) == pytest.approx(2 / 8)
    # sequence: row 0 ceil(0.2 * 5) = 1 -> 0.9; row 1 ceil(0.2 * 3) = 1 -> 0.95
    f, _ = TOKEN_WEIGHTS.get("forking")(mask, entropy=entropy, scope="sequence")
    assert torch.equal(f, torch.tensor([[0.0, 1, 0, 0, 0], [1.0, 0, 0, 0, 0]]))


@pytest.mark.parametrize("n_valid", [1, 4, 5, 14, 15, 37])
def test_forking_keeps_exactly_ceil_fraction_with_ties(n_valid):
    torch.manual_seed(n_valid)
    entropy = torch.randint(0, 3, (1, 40)).float()  # many ties
    mask = torch.zeros(1, 40)
    mask[0, :n_valid] = 1
    f, _ = TOKEN_WEIGHTS.get("forking")(mask, entropy=entropy)
    assert int(f.sum()) == math.ceil(round(0.2 * n_valid, 9))  # 0.2 * 15 = 3.0000000000000004 -> 3
    # ties resolve to the earliest positions: equal entropies -> the first k valid tokens
    f, _ = TOKEN_WEIGHTS.get("forking")(mask, entropy=torch.ones(1, 40))
    assert torch.equal(f[0, : int(f.sum())], torch.ones(int(f.sum())))


def test_forking_gradient_is_zero_on_non_fork_tokens():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 5, requires_grad=True)
    tokens = torch.randint(0, 5, (2, 6))
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)  # [B, T]
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    mask = torch.ones(2, 6)
    f, _ = TOKEN_WEIGHTS.get("forking")(mask, entropy=entropy)
    loss, _ = ppo_clip_loss(LossInputs(logp=logp, old_logp=logp.detach(), adv=torch.tensor([1.0, -1.0]), mask=mask))
    ((loss * f).sum() / f.sum()).backward()
    grad_norm = logits.grad.abs().sum(-1)  # [B, T]
    assert torch.equal(grad_norm[f == 0], torch.zeros(int((f == 0).sum())))
    assert bool((grad_norm[f == 1] > 0).all())


# ---------------------------------------------------------------- entropy band


def test_entropy_band_hand_computed_and_gradient():
    # forks [1, 2, 3, 4, 5]: Q_0.1 = 1 + 0.4 = 1.4 (linear), Q_0.5 = 3
    # violations: 1 -> 0.4 below; 4 -> 1, 5 -> 2 above; total 3.4 over N = 5 forks -> 0.68
    h = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 100.0]], requires_grad=True)
    forks = torch.tensor([[1.0, 1, 1, 1, 1, 0]])  # the 100 is not a fork and is ignored
    pen, _ = entropy_band_penalty(h, forks, coef=1.0)
    assert float(pen.detach()) == pytest.approx(0.68)
    pen.backward()
    # +coef/N above H_high, -coef/N below H_low, 0 inside the band and off the fork set
    assert torch.allclose(h.grad, torch.tensor([[-0.2, 0.0, 0.0, 0.2, 0.2, 0.0]]))


def test_entropy_band_zero_for_equal_fork_entropies_and_no_forks():
    h = torch.tensor([[2.0, 2.0, 2.0], [1.0, 7.0, 3.0]], requires_grad=True)
    forks = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    pen, _ = entropy_band_penalty(h, forks, coef=3.0)
    assert float(pen.detach()) == 0.0 and torch.isfinite(pen)
    pen.backward()
    assert torch.equal(h.grad, torch.zeros(2, 3))


# ---------------------------------------------------------------- variational


def test_variational_forward_kl_weights_hand_computed():
    # group 0 (rows 0-3) binary rewards [1, 0, 1, 0] -> 1[correct]/#correct = [1/2, 0, 1/2, 0]
    # group 1 (rows 4-5) all wrong -> 0; group 2 (rows 6-8) [0.5, 0.25, 0.25] -> r / sum r
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.25, 0.25])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    mask = torch.ones(9, 2)
    mask[0, 1] = 0
    w, m = TOKEN_WEIGHTS.get("variational")(mask, rewards=r, group_ids=g)
    row = torch.tensor([0.5, 0, 0.5, 0, 0, 0, 0.5, 0.25, 0.25])
    assert torch.allclose(w, mask * row[:, None])
    assert float(m["variational/trained_frac"]) == pytest.approx(5 / 9)
