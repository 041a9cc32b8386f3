"""INTELLECT-2's deterministic task sampling: the learner redraws a worker's prompts and refuses other ones."""

import copy

import torch

from grpokit.distributed.prompt_draw import draw_indices, draw_seed, prompts_match
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.setup import render_all

ROWS = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10)]


def test_the_draw_depends_only_on_seed_request_and_worker():
    first = draw_indices(0, 3, 1, 4, 10)
    assert first == draw_indices(0, 3, 1, 4, 10)  # recomputable by the learner
    assert len(set(first)) == 4 and all(0 <= i < 10 for i in first)  # distinct rows of the split
    assert draw_seed(0, 3, 1) == draw_seed(0, 3, 1) < 2**63
    others = {tuple(draw_indices(s, r, w, 4, 10)) for s, r, w in [(1, 3, 1), (0, 4, 1), (0, 3, 0)]}
    assert tuple(first) not in others  # another seed, request or worker: another draw
    assert sorted(draw_indices(0, 0, 0, 10, 10)) == list(range(10)) and len(draw_indices(0, 0, 0, 12, 10)) == 12


def _batch(model, tok, rows):
    torch.manual_seed(0)
    return HFBackend(model, tok).generate(render_all(tok, rows, None), rows, 2, SamplingParams(max_new_tokens=4))


def test_prompts_match_accepts_the_draw_and_refuses_other_prompts():
    model, tok = tiny_model_and_tokenizer(seed=0)
    mine = [ROWS[i] for i in draw_indices(0, 5, 1, 2, len(ROWS))]
    texts = render_all(tok, mine, None)
    honest = _batch(model, tok, mine)
    assert prompts_match(honest, mine, texts, tok, 2) == (True, "")
    # a worker that used another worker's draw (or easier prompts of its choice)
    theirs = [ROWS[i] for i in draw_indices(0, 5, 0, 2, len(ROWS))]
    assert theirs != mine
    ok, why = prompts_match(_batch(model, tok, theirs), mine, texts, tok, 2)
    assert not ok and "data row" in why
    # the drawn rows, but prompt tokens of other prompts (the columns kept, the question changed)
    swapped = copy.deepcopy(_batch(model, tok, theirs))
    swapped.rows = list(honest.rows)
    ok, why = prompts_match(swapped, mine, texts, tok, 2)
    assert not ok and "prompt tokens" in why
    # an altered answer column (the reward reads it)
    forged = copy.deepcopy(honest)
    forged.rows[1] = {**forged.rows[1], "answer": "0"}
    assert not prompts_match(forged, mine, texts, tok, 2)[0]
    assert not prompts_match(honest, mine[:1], texts[:1], tok, 2)[0]  # more rows than the draw
