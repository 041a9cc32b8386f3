"""INTELLECT-2 length penalty ``length_target``: r = r_task − 3e-4·|L* − L| (arXiv 2505.07291, §3)."""

import pytest

from grpokit.registries import get_registry
from grpokit.rewards.length import length_target
from grpokit.testing import save_tiny_model


def test_spec_example_target_2000_length_2500():
    # r_task = 1, L* = 2000, L = 2500: r = 1 − 3e-4 · 500 = 1 − 0.15 = 0.85
    (penalty,) = length_target(["q"], ["x" * 2500], target=2000)
    assert 1.0 + penalty == pytest.approx(0.85)


def test_zero_at_target_symmetric_and_linear():
    out = length_target(["q"] * 5, ["x" * n for n in (10, 6, 14, 0, 20)], target=10, coef=0.5)
    assert out == [0.0, -2.0, -2.0, -5.0, -5.0]  # -0.5·|10 − L|: 0, 4, 4, 10, 10 off


def test_row_target_column_wins_and_none_without_any_target():
    out = length_target(["q"] * 3, ["abc", "abc", "abc"], target_length=[3, None, 5])
    assert out == [0.0, None, pytest.approx(-6e-4)]  # row 2: no column value, no option -> not applicable
    assert length_target(["q"], ["abc"], target_length=[None], target=4) == [pytest.approx(-3e-4)]


def test_lengths_in_tokens_of_a_tokenizer(tmp_path):
    folder = save_tiny_model(tmp_path)  # character-level tokenizer: "<|im_end|>" is one token, not 10
    assert length_target(["q"], ["ab<|im_end|>"], target=3, coef=1.0, tokenizer=folder) == [0.0]
    assert length_target(["q"], ["ab<|im_end|>"], target=3, coef=1.0) == [-9.0]  # 12 characters


def test_registered_and_rejects_negative_coef():
    assert get_registry("reward").get("length_target") is length_target
    with pytest.raises(ValueError, match="coef"):
        length_target(["q"], ["a"], target=1, coef=-1.0)
