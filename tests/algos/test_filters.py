import pytest
import torch

from grpokit.algos.advantages import grpo_advantage
from grpokit.algos.filters import FILTERS


def test_dynamic_sampling_drops_zero_variance_groups():
    # DAPO (arXiv 2503.14476, §3.2): [1,1,1,1] dropped, [1,0,0,0] kept; an all-wrong group [0,0,0,0] is dropped too.
    # Rows are interleaved (group ids not contiguous).
    g = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    keep, m = FILTERS.get("dynamic_sampling")(r, g)
    assert keep.dtype == torch.bool
    assert torch.equal(keep, g == 1)
    assert float(m["filter/kept_groups_frac"]) == pytest.approx(1 / 3)
    assert float(m["filter/kept_frac"]) == pytest.approx(4 / 12)
    # the kept rows are exactly those with a non-zero GRPO advantage somewhere in their group
    adv, _ = grpo_advantage(r, g)
    assert bool((adv[~keep] == 0).all())


def test_dynamic_sampling_min_range_and_absent_group_ids():
    # group ids 0 and 2 present, 1 absent; group 2 rewards differ by 0.01 only
    r = torch.tensor([0.0, 1.0, 0.50, 0.51])
    g = torch.tensor([0, 0, 2, 2])
    keep, m = FILTERS.get("dynamic_sampling")(r, g)
    assert keep.tolist() == [True, True, True, True]
    keep, m = FILTERS.get("dynamic_sampling")(r, g, min_range=0.05)
    assert keep.tolist() == [True, True, False, False]
    assert float(m["filter/kept_groups_frac"]) == pytest.approx(0.5)  # of the 2 present groups


def test_overlong_punishment_dapo_values():
    # L_max = 20480, L_cache = 4096 -> ramp starts at 16384:
    # 16384 -> 0; 18432 -> (16384 - 18432)/4096 = -0.5; 20480 -> -4096/4096 = -1; 20481 -> -1 (over)
    lengths = torch.tensor([100, 16384, 18432, 20480, 20481])
    r, m = FILTERS.get("overlong_punishment")(lengths, max_len=20480, cache_len=4096)
    assert torch.allclose(r, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    assert float(m["overlong/penalised_frac"]) == pytest.approx(3 / 5)


def test_overlong_punishment_is_monotone_and_validates():
    lengths = torch.arange(0, 64)
    r, _ = FILTERS.get("overlong_punishment")(lengths, max_len=48, cache_len=16)
    assert bool((r[1:] <= r[:-1]).all()) and float(r.max()) == 0.0 and float(r.min()) == -1.0
    with pytest.raises(ValueError, match="cache_len"):
        FILTERS.get("overlong_punishment")(lengths, max_len=48, cache_len=0)
    with pytest.raises(ValueError, match="max_len"):
        FILTERS.get("overlong_punishment")(lengths)


def test_mask_truncated_zeroes_truncated_rows():
    # rows 1 and 2 were cut off at the length cap -> their loss mask is zeroed, row 0 kept
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    truncated = torch.tensor([False, True, True])
    out, m = FILTERS.get("mask_truncated")(mask, truncated=truncated)
    assert torch.equal(out, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert float(m["filter/truncated_frac"]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="truncated"):
        FILTERS.get("mask_truncated")(mask)
