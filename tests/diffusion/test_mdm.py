"""Masked-diffusion LM: sampler schedule and remasking, the three likelihoods, ESPO's ratio and KL, load-time refusals."""

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from grpokit.algos.espo import kl_seq_k2
from grpokit.algos.losses import LossInputs
from grpokit.algos.ratios import sequence_ratio
from grpokit.families.masked_diffusion.likelihoods import (
    CanvasInputs, coupled_elbo_terms, espo_elbo_logp, llada_sft_loss, mask_grpo_step_logp, masked_prompts, stand_in_logp,
    step_canvases, through_first_eos,
)
from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, mdm_logits
from grpokit.families.masked_diffusion.sampler import SamplerOptions, commit_top, generate, transfer_schedule

TOK = MDMTokenizer()
V = len(TOK)


class TableModel(torch.nn.Module):
    """Toy mask predictor: logits[b, s] = table[s] (position-dependent) or table[0] everywhere (unigram); records its inputs."""

    def __init__(self, table: torch.Tensor, unigram: bool = False) -> None:
        super().__init__()
        self.table, self.unigram, self.seen = torch.nn.Parameter(table.clone()), unigram, []

    def forward(self, input_ids, attention_mask, position_ids):
        self.seen.append(input_ids.clone())
        b, s = input_ids.shape
        rows = self.table[:1].expand(s, -1) if self.unigram else self.table[:s]
        return SimpleNamespace(logits=rows[None].expand(b, -1, -1))


def logits_fn(model):
    return lambda ids, att: mdm_logits(model, ids, att)


def prompt(texts):
    from grpokit.families.masked_diffusion.pretrain import encode_rows

    ids, mask, _ = encode_rows(TOK, texts, None, 0)
    return ids, mask


def test_transfer_schedule_spreads_the_mask_count_and_sums_to_it():
    sched = transfer_schedule(torch.tensor([7, 8, 2]), 3)
    # 7 = 3 + 2 + 2 (remainder 1 goes to the first step); 8 = 3 + 3 + 2; 2 = 1 + 1 + 0
    assert sched.tolist() == [[3, 2, 2], [3, 3, 2], [1, 1, 0]]
    for count, steps in itertools.product(range(0, 13), range(1, 7)):
        assert int(transfer_schedule(torch.tensor([count]), steps).sum()) == count


def test_commit_top_takes_the_k_largest_and_never_a_minus_inf():
    conf = torch.tensor([[0.1, 0.9, float("-inf"), 0.5], [0.3, float("-inf"), float("-inf"), 0.2]])
    chosen = commit_top(conf, torch.tensor([2, 3]))
    assert chosen.tolist() == [[False, True, False, True], [True, False, False, True]]  # row 2 has only 2 finite


def test_low_confidence_remasking_commits_the_most_confident_positions_first():
    p_ids, p_mask = prompt(["rev 12"])
    length, width = 4, p_ids.shape[1] + 4
    table = torch.zeros(width, V)
    # canvas position j proposes digit token j with logit c_j: confidence order 2 > 0 > 3 > 1
    for j, c in enumerate([2.0, 0.5, 4.0, 1.0]):
        table[p_ids.shape[1] + j, TOK.index[str(j)]] = c
    traj = generate(TableModel(table), p_ids, p_mask, length, SamplerOptions(steps=4, temperature=0.0), TOK.mask_id)
    assert traj.commit_step.tolist() == [[1, 3, 0, 2]]
    assert TOK.decode(traj.canvas[0]) == "0123"
    # step k's recorded log-prob: log softmax of the committed position's logits at its token (one position per step)
    # ([PAD] and [MASK] are never predicted: V - 3 other tokens with logit 0)
    expected = [math.log(math.exp(c) / (math.exp(c) + V - 3)) for c in (4.0, 2.0, 1.0, 0.5)]
    assert torch.allclose(traj.step_logp[0], torch.tensor(expected), atol=1e-6)


def test_random_remasking_and_blocks_keep_the_block_order():
    p_ids, p_mask = prompt(["rev 12", "sort 9"])
    model = build_mdm(V, hidden=16, layers=1, heads=2)
    gen = torch.Generator().manual_seed(0)
    traj = generate(model, p_ids, p_mask, 8, SamplerOptions(steps=4, block_length=4, remasking="random"), TOK.mask_id, gen)
    assert bool((traj.canvas != TOK.mask_id).all())
    # 2 blocks of 4 positions, 2 steps each, 2 tokens per step: block 1 is done in steps 0-1, block 2 in steps 2-3
    assert bool((traj.commit_step[:, :4] <= 1).all()) and bool((traj.commit_step[:, 4:] >= 2).all())
    assert (traj.commit_step == 0).sum(-1).tolist() == [2, 2]
    with pytest.raises(ValueError, match="diffusion.block_length 3 must divide"):
        SamplerOptions(block_length=3).resolved(8)


def _inputs(p_texts, canvases, seeds, commit=None, steps=0):
    p_ids, p_mask = prompt(p_texts)
    canvas = torch.tensor([TOK.encode(c) if isinstance(c, str) else c for c in canvases])
    commit = commit if commit is not None else torch.full_like(canvas, -1)
    return CanvasInputs(p_ids, p_mask, canvas, commit, torch.tensor(seeds), steps)


def test_stand_in_is_the_log_prob_of_each_token_with_the_completion_fully_masked():
    inp = _inputs(["rev 12"], [[TOK.index["2"], TOK.index["1"], TOK.eos_id, TOK.eos_id]], [5])
    torch.manual_seed(0)
    model = TableModel(torch.randn(20, V))
    logp, mask = stand_in_logp(logits_fn(model), inp, mask_id=TOK.mask_id, eos_id=TOK.eos_id, prompt_mask_prob=0.0)
    p = inp.prompt_ids.shape[1]
    assert bool((model.seen[0][:, p:] == TOK.mask_id).all()) and torch.equal(model.seen[0][:, :p], inp.prompt_ids)
    allowed = model.table[p : p + 4].detach().clone()
    allowed[:, [TOK.pad_id, TOK.mask_id]] = float("-inf")  # never predicted
    expected = torch.log_softmax(allowed, -1).gather(-1, inp.canvas[0, :, None]).squeeze(-1)
    assert mask.tolist() == [[1, 1, 1, 0]]  # through the first EOS (d1's completion mask)
    assert torch.allclose(logp[0], expected * mask[0], atol=1e-6)


def test_prompt_masks_follow_the_seed_and_ignore_left_padding():
    inp = _inputs(["rev 123456", "rev 1"], [[3, 4], [3, 4]], [11, 11])
    a = masked_prompts(inp, 0.5, TOK.mask_id)
    b = masked_prompts(inp, 0.5, TOK.mask_id)
    assert torch.equal(a, b)
    # row 2 is left-padded; its real tokens see the same uniform draws as the first 5 of row 1 (same seed)
    real2 = inp.prompt_mask[1].bool()
    assert torch.equal(a[1, real2] == TOK.mask_id, (a[0, : int(real2.sum())] == TOK.mask_id))
    assert bool((a[1, ~real2] == TOK.pad_id).all())
    frac = float((masked_prompts(_inputs(["rev 1234567890"] * 200, [[3]] * 200, list(range(200))), 0.15, TOK.mask_id)
                  == TOK.mask_id).float().mean())
    assert abs(frac - 0.15) < 0.02


def test_coupled_elbo_averaged_over_every_mask_equals_the_sum_of_log_probs_for_a_unigram_predictor():
    torch.manual_seed(1)
    model = TableModel(torch.randn(1, V), unigram=True)
    inp = _inputs(["rev 12"], ["3141"], [0])
    length = 4
    logp_all = torch.log_softmax(model.table[0].detach().index_fill(0, torch.tensor([0, 1]), float('-inf')), -1)
    exact = float(logp_all[inp.canvas[0]].sum().detach())  # sum_k log p(y_k)
    total = 0.0
    for n in range(length + 1):  # n uniform on {0..L}, then a uniform subset of size n
        subsets = list(itertools.combinations(range(length), n))
        for subset in subsets:
            masked = torch.zeros(1, length, dtype=torch.bool)
            masked[0, list(subset)] = True
            lp = logp_all[inp.canvas].expand(1, -1)  # position-independent: the same under any mask
            terms = coupled_elbo_terms(lp, lp, masked)
            total += float(terms.sum()) / ((length + 1) * len(subsets))
    assert total == pytest.approx(exact, rel=1e-6)
    # the registered estimator on the same toy: any seed gives an unbiased draw; its mean over seeds approaches the exact value
    draws = [float(espo_elbo_logp(logits_fn(model), _inputs(["rev 12"], ["3141"], [s]), mask_id=TOK.mask_id,
                                  eos_id=TOK.eos_id, num_mc=1)[0].sum()) for s in range(400)]
    assert sum(draws) / len(draws) == pytest.approx(exact, rel=0.05)


def test_coupled_elbo_terms_by_hand():
    # L = 2, position 0 masked: t = 1/3, complement t' = 1/3; terms: 0.5 * (l0 / t) at 0 and 0.5 * (l1' / t') at 1
    lp = torch.tensor([[-1.0, -2.0]])
    lpc = torch.tensor([[-4.0, -3.0]])
    terms = coupled_elbo_terms(lp, lpc, torch.tensor([[True, False]]))
    assert torch.allclose(terms, torch.tensor([[0.5 * -1.0 * 3, 0.5 * -3.0 * 3]]))
    # nothing masked: the first half adds 0, the complement (all masked, t' = 2/3) adds 0.5 * l' * 3/2
    terms = coupled_elbo_terms(lp, lpc, torch.tensor([[False, False]]))
    assert torch.allclose(terms, torch.tensor([[0.5 * -4.0 * 1.5, 0.5 * -3.0 * 1.5]]))


def test_mask_grpo_step_log_probs_are_sums_over_each_steps_committed_positions_and_replay_the_sampler():
    torch.manual_seed(2)
    p_ids, p_mask = prompt(["rev 12", "sort 31"])
    model = build_mdm(V, hidden=16, layers=1, heads=2)
    gen = torch.Generator().manual_seed(3)
    traj = generate(model, p_ids, p_mask, 6, SamplerOptions(steps=3, temperature=1.0), TOK.mask_id, gen)
    inp = CanvasInputs(p_ids, p_mask, traj.canvas, traj.commit_step, torch.zeros(2, dtype=torch.long), 3)
    logp, mask = mask_grpo_step_logp(logits_fn(model), inp, mask_id=TOK.mask_id, eos_id=TOK.eos_id)
    assert mask.tolist() == [[1, 1, 1, 0, 0, 0]] * 2
    assert torch.allclose(logp[:, :3], traj.step_logp, atol=1e-5)  # rescoring = what the sampler recorded
    # by hand for step 1 of row 0: the canvas with step-0 tokens revealed, log p summed over step 1's positions
    states = step_canvases(traj.canvas, traj.commit_step, 3, TOK.mask_id)
    x = torch.cat([p_ids[:1], states[0, 1][None]], 1)
    att = torch.cat([p_mask[:1], torch.ones(1, 6, dtype=torch.long)], 1)  # row 0's prompt is left-padded
    lp = torch.log_softmax(mdm_logits(model, x, att), -1)[0, p_ids.shape[1]:]
    committed = (traj.commit_step[0] == 1).nonzero().flatten()
    assert float(logp[0, 1]) == pytest.approx(float(lp[committed, traj.canvas[0, committed]].sum()), abs=1e-5)
    assert bool((states[0, 0] == TOK.mask_id).all())


def test_espo_ratio_is_exp_delta_whatever_the_length_and_its_kl_is_beta_delta_squared_over_2l():
    for length in (3, 8):
        old = torch.randn(2, length)
        delta = 0.05
        logp = old + delta  # ELBO - ELBO_old = L * delta
        mask = torch.ones(2, length)
        r = sequence_ratio(LossInputs(logp=logp, old_logp=old, adv=torch.zeros(2), mask=mask))
        assert torch.allclose(r, torch.full_like(r, math.exp(delta)), atol=1e-6)
        kl = kl_seq_k2(logp, old)  # every row: D = L * delta
        agg = (kl.sum(-1) / length).mean()  # seq_mean_token_mean
        assert float(agg) == pytest.approx((length * delta) ** 2 / (2 * length), rel=1e-5)
        assert float(kl_seq_k2(old, old).abs().max()) == 0.0


def test_llada_sft_loss_of_a_uniform_predictor_is_log_v_in_expectation():
    model = TableModel(torch.zeros(1, V), unigram=True)
    p_ids, p_mask = prompt(["rev 12"] * 4000)
    answer = torch.tensor([TOK.encode("21") + [TOK.eos_id] * 2] * 4000)
    gen = torch.Generator().manual_seed(0)
    loss = llada_sft_loss(logits_fn(model), p_ids, p_mask, answer, TOK.mask_id, gen)
    # each masked token costs log(V - 2) / p_mask ([PAD], [MASK] never predicted) and E[#masked] = L p_mask: E[loss] = log(V - 2)
    assert float(loss) == pytest.approx(math.log(V - 2), rel=0.03)


def test_through_first_eos_and_tokenizer():
    e = TOK.eos_id
    assert through_first_eos(torch.tensor([[3, e, e], [3, 4, 5], [e, 3, e]]), e).tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    assert TOK.decode(TOK.encode("12+3=") + [e, TOK.index["9"]]) == "12+3="
    with pytest.raises(ValueError, match="outside the masked-diffusion vocabulary"):
        TOK.encode("Rev 12", "prompt")
