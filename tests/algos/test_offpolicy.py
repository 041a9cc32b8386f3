"""Off-policy / sampler-mismatch corrections: hand-computed weights and metrics, on-policy identity, contract."""

import math

import pytest
import torch

from grpokit.algos.offpolicy import CORRECTIONS, mismatch_kl

LN = math.log
INF = float("inf")


def token_batch():
    """One row of 4 sampled tokens + 1 padding position; rho = p_old / p_behav = [2, 1, 1/4, 9]."""
    old = torch.tensor([[LN(0.5), LN(0.5), LN(0.1), LN(0.9), -INF]])
    behav = torch.tensor([[LN(0.25), LN(0.5), LN(0.4), LN(0.1), -INF]])  # padding: -inf - -inf = nan
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    return old, behav, mask


def sequence_batch():
    """2 x 3 with a padded last token in row 1. behav = log 0.1 everywhere, old = log(0.1 rho).

    row 0: rho = [2, 2, 1/2] -> product 2, geometric mean 2^(1/3) = 1.259921
    row 1: rho = [4, 2, pad] -> product 8, geometric mean sqrt(8) = 2.828427 (the pad's +inf is ignored)
    """
    behav = torch.full((2, 3), LN(0.1))
    old = torch.tensor([[LN(0.2), LN(0.2), LN(0.05)], [LN(0.4), LN(0.2), 0.0]])
    behav[1, 2] = -INF
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return old, behav, mask


# (name, options, expected weight incl. padding = 1, {metric: value}) on token_batch()
TOKEN_CASES = [
    ("none", {}, [1, 1, 1, 1, 1], {}),
    # decoupled, AReaL's rule: rho > cap -> 0, rho == cap kept. cap 5: 9 > 5 -> 0; mean (2 + 1 + 1/4 + 0) / 4
    ("decoupled", {}, [2, 1, 0.25, 0, 1], {"masked_frac": 1 / 4, "truncated_frac": 0.0, "weight_mean": 3.25 / 4}),
    # cap 2: 2 == cap is kept, 9 -> 0
    ("decoupled", {"cap": 2.0}, [2, 1, 0.25, 0, 1], {"masked_frac": 1 / 4}),
    # cap 1.5: 2 > 1.5 -> 0 and 9 -> 0
    ("decoupled", {"cap": 1.5}, [0, 1, 0.25, 0, 1], {"masked_frac": 2 / 4, "weight_mean": 1.25 / 4}),
    # no cap: the raw ratios
    ("decoupled", {"cap": None}, [2, 1, 0.25, 9, 1], {"masked_frac": 0.0, "weight_mean": 12.25 / 4}),
    # tis_token cap 2: min(rho, 2) = [2, 1, 1/4, 2]; only 9 is truncated (2 == cap is not)
    ("tis_token", {}, [2, 1, 0.25, 2, 1], {"truncated_frac": 1 / 4, "masked_frac": 0.0, "weight_mean": 5.25 / 4}),
    # cap 1.5: [1.5, 1, 1/4, 1.5], two truncated; mean 4.25 / 4
    ("tis_token", {"cap": 1.5}, [1.5, 1, 0.25, 1.5, 1], {"truncated_frac": 2 / 4, "weight_mean": 4.25 / 4}),
    # mis_token band [0.5, 5]: 1/4 < 0.5 -> 0, 9 > 5 -> 0; mean (2 + 1) / 4
    ("mis_token", {}, [2, 1, 0, 0, 1], {"masked_frac": 2 / 4, "truncated_frac": 0.0, "weight_mean": 3 / 4}),
    # open below: only 9 > 5 is dropped
    ("mis_token", {"low": None}, [2, 1, 0.25, 0, 1], {"masked_frac": 1 / 4}),
    # band [0.25, 2]: both edges are inside (kept), 9 is dropped
    ("mis_token", {"low": 0.25, "high": 2.0}, [2, 1, 0.25, 0, 1], {"masked_frac": 1 / 4}),
]

# (name, options, expected weight, {metric: value}) on sequence_batch(); 5 valid tokens (3 + 2)
SEQUENCE_CASES = [
    # product: row 0 s = 2 (== cap, kept), row 1 s = 8 -> 2 (2 tokens truncated); mean (3*2 + 2*2) / 5 = 2
    ("tis_sequence", {}, [[2, 2, 2], [2, 2, 1]], {"truncated_frac": 2 / 5, "masked_frac": 0.0, "weight_mean": 2.0}),
    # cap 4: row 1 -> 4; mean (3*2 + 2*4) / 5 = 2.8
    ("tis_sequence", {"cap": 4.0}, [[2, 2, 2], [4, 4, 1]], {"truncated_frac": 2 / 5, "weight_mean": 2.8}),
    # geometric: row 0 2^(1/3), row 1 sqrt(8) -> 2; mean (3 * 2^(1/3) + 2*2) / 5
    (
        "tis_sequence",
        {"geometric": True},
        [[2 ** (1 / 3)] * 3, [2, 2, 1]],
        {"truncated_frac": 2 / 5, "weight_mean": (3 * 2 ** (1 / 3) + 4) / 5},
    ),
    # band [1/2, 2]: row 0 s = 2 (edge, kept), row 1 s = 8 dropped; mean 3*2 / 5
    ("mis_sequence", {}, [[2, 2, 2], [0, 0, 1]], {"masked_frac": 2 / 5, "truncated_frac": 0.0, "weight_mean": 6 / 5}),
    # no band: the raw products; mean (3*2 + 2*8) / 5
    ("mis_sequence", {"low": None, "high": None}, [[2, 2, 2], [8, 8, 1]], {"masked_frac": 0.0, "weight_mean": 22 / 5}),
    # geometric, band [1/2, 2]: row 0 2^(1/3) kept, row 1 sqrt(8) = 2.83 > 2 dropped
    ("mis_sequence", {"geometric": True}, [[2 ** (1 / 3)] * 3, [0, 0, 1]], {"masked_frac": 2 / 5}),
    # geometric, band [1/2, 3]: both kept
    ("mis_sequence", {"geometric": True, "high": 3.0}, [[2 ** (1 / 3)] * 3, [8**0.5, 8**0.5, 1]], {"masked_frac": 0.0}),
]


def _check(name, options, batch, expected_weight, expected_metrics):
    w, metrics = CORRECTIONS.get(name)(*batch, **options)
    torch.testing.assert_close(w, torch.tensor(expected_weight, dtype=torch.float32).reshape(w.shape), rtol=1e-6, atol=1e-6)
    for key, value in expected_metrics.items():
        assert float(metrics[f"offpolicy/{key}"]) == pytest.approx(value, rel=1e-6, abs=1e-7), key


@pytest.mark.parametrize("name,options,weight,metrics", TOKEN_CASES)
def test_token_level_hand_computed(name, options, weight, metrics):
    _check(name, options, token_batch(), [weight], metrics)


@pytest.mark.parametrize("name,options,weight,metrics", SEQUENCE_CASES)
def test_sequence_level_hand_computed(name, options, weight, metrics):
    _check(name, options, sequence_batch(), weight, metrics)


@pytest.mark.parametrize("name", CORRECTIONS.names())
def test_every_correction_has_a_hand_computed_case(name):
    assert name in {case[0] for case in TOKEN_CASES + SEQUENCE_CASES}, f"correction '{name}' has no hand-computed case"


@pytest.mark.parametrize("name", [n for n in CORRECTIONS.names() if n != "none"])
def test_mismatch_kl_metrics_hand_computed(name):
    # token_batch: log rho = [ln 2, 0, ln 1/4, ln 9], sum = ln(2 * 9 / 4) = ln 4.5, sum rho = 12.25
    # k1 = mean(behav - old) = -ln 4.5 / 4 = -0.376019
    # k3 = mean(rho - 1 - log rho) = (12.25 - 4 - ln 4.5) / 4 = 1.686481
    _, m = CORRECTIONS.get(name)(*token_batch())
    assert float(m["offpolicy/kl_k1"]) == pytest.approx(-LN(4.5) / 4, rel=1e-6)
    assert float(m["offpolicy/kl_k3"]) == pytest.approx((12.25 - 4 - LN(4.5)) / 4, rel=1e-6)
    # sequence_batch: log rho = [ln 2, ln 2, -ln 2 | ln 4, ln 2] (pad ignored), sum = 4 ln 2, sum rho = 10.5
    # k1 = -4 ln 2 / 5 = -0.554518; k3 = (10.5 - 5 - 4 ln 2) / 5 = 0.545482
    _, m = CORRECTIONS.get(name)(*sequence_batch())
    assert float(m["offpolicy/kl_k1"]) == pytest.approx(-4 * LN(2) / 5, rel=1e-6)
    assert float(m["offpolicy/kl_k3"]) == pytest.approx((10.5 - 5 - 4 * LN(2)) / 5, rel=1e-6)


def test_mismatch_kl_matches_the_corrections_metrics():
    _, m = CORRECTIONS.get("tis_token")(*sequence_batch())
    kl = mismatch_kl(*sequence_batch())
    assert set(kl) == {"offpolicy/kl_k1", "offpolicy/kl_k3"}
    assert all(torch.equal(kl[k], m[k]) for k in kl)


ON_POLICY_CASES = [(n, {}) for n in CORRECTIONS.names()] + [
    (n, {"geometric": True}) for n in CORRECTIONS.names() if "geometric" in CORRECTIONS.option_names(n)
]


@pytest.mark.parametrize("name,options", ON_POLICY_CASES)
def test_on_policy_gives_weight_one_and_zero_kl(name, options):
    g = torch.Generator().manual_seed(0)
    old = torch.randn(4, 7, generator=g) - 2.0
    mask = (torch.rand(4, 7, generator=g) > 0.3).float()
    mask[2] = 0.0  # an empty row
    w, m = CORRECTIONS.get(name)(old, old.clone(), mask, **options)
    assert torch.equal(w, torch.ones_like(w))  # exp(0) = 1 exactly, on the mask and off it
    for key, value in m.items():
        expected = 1.0 if key == "offpolicy/weight_mean" else 0.0
        assert float(value) == expected, key


@pytest.mark.parametrize("name", CORRECTIONS.names())
def test_weights_and_metrics_carry_no_gradient(name):
    # at mu = 1 the trainer may hand in the learner's own log-probs; the weight must still be a constant
    old = torch.tensor([[LN(0.5), LN(0.1)]], requires_grad=True)
    behav = torch.tensor([[LN(0.25), LN(0.4)]], requires_grad=True)
    w, m = CORRECTIONS.get(name)(old * 1.0, behav * 1.0, torch.ones(1, 2))
    assert not w.requires_grad and w.grad_fn is None
    assert w.dtype == torch.float32
    assert all(not v.requires_grad and v.dim() == 0 for v in m.values())


@pytest.mark.parametrize("name", CORRECTIONS.names())
def test_no_tensor_is_created_on_the_default_device(name):
    # inputs on CPU, default device meta: a tensor created without the inputs' device would land on meta and fail
    old, behav, mask = sequence_batch()
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        w, m = CORRECTIONS.get(name)(old, behav, mask)
    finally:
        torch.set_default_device(previous)
    assert w.device.type == "cpu" and all(v.device.type == "cpu" for v in m.values())


def test_low_precision_inputs_give_float32_weights():
    old, behav, mask = token_batch()
    w, _ = CORRECTIONS.get("tis_token")(old[:, :4].bfloat16(), behav[:, :4].bfloat16(), mask[:, :4])
    assert w.dtype == torch.float32


def test_non_finite_log_probs_on_kept_tokens():
    # token 0: both -inf (nan log-ratio) -> taken as rho = 1; token 1: behav -inf -> log rho clamped to 20
    old = torch.tensor([[-INF, LN(0.5)]])
    behav = torch.tensor([[-INF, -INF]])
    mask = torch.ones(1, 2)
    w, m = CORRECTIONS.get("tis_token")(old, behav, mask)
    assert torch.equal(w, torch.tensor([[1.0, 2.0]]))  # min(e^20, 2) = 2
    assert all(math.isfinite(float(v)) for v in m.values())
    w, _ = CORRECTIONS.get("mis_token")(old, behav, mask)
    assert torch.equal(w, torch.tensor([[1.0, 0.0]]))
    w, _ = CORRECTIONS.get("decoupled")(old, behav, mask)
    assert torch.equal(w, torch.tensor([[1.0, 0.0]]))
    w, _ = CORRECTIONS.get("tis_sequence")(old, behav, mask)
    assert torch.equal(w, torch.tensor([[2.0, 2.0]]))  # sum of log-ratios 0 + 20 -> min(e^20, 2)


def test_none_reads_no_behaviour_log_probs():
    w, m = CORRECTIONS.get("none")(torch.zeros(2, 3), None, torch.ones(2, 3))
    assert torch.equal(w, torch.ones(2, 3)) and m == {}


def test_declared_properties_and_options():
    assert CORRECTIONS.names() == ["decoupled", "mis_sequence", "mis_token", "none", "tis_sequence", "tis_token"]
    assert CORRECTIONS.spec("none").inputs == ()
    assert all(CORRECTIONS.spec(n).inputs == ("behaviour_logp",) for n in CORRECTIONS.names() if n != "none")
    assert CORRECTIONS.option_names("none") == []
    assert CORRECTIONS.option_names("decoupled") == ["cap"]
    assert CORRECTIONS.option_names("tis_token") == ["cap"]
    assert CORRECTIONS.option_names("tis_sequence") == ["cap", "geometric"]
    assert CORRECTIONS.option_names("mis_token") == ["high", "low"]
    assert CORRECTIONS.option_names("mis_sequence") == ["geometric", "high", "low"]


def test_an_option_typo_is_refused_naming_the_valid_keys():
    with pytest.raises(ValueError, match="valid keys: cap, geometric"):
        CORRECTIONS.check_options("tis_sequence", {"clip_max": 3.0}, "algorithm.correction_options")


@pytest.mark.parametrize(
    "name,options",
    [
        ("decoupled", {"cap": 0.5}),
        ("tis_token", {"cap": 0.9}),
        ("tis_sequence", {"cap": 0.0}),
        ("mis_token", {"low": 1.5}),
        ("mis_token", {"low": -0.1}),
        ("mis_sequence", {"high": 0.8}),
    ],
)
def test_bounds_that_would_reweight_on_policy_tokens_are_refused(name, options):
    with pytest.raises(ValueError, match="on-policy"):
        CORRECTIONS.get(name)(*token_batch(), **options)
