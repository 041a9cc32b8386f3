"""PackedLinear is F.linear with a faster weight layout: same numbers, any row count."""

import pytest
import torch
import torch.nn.functional as F

from grpokit.model.packed_linear import PackedLinear, onednn_available


@pytest.mark.parametrize("rows", [1, 7, 32, 300])
@pytest.mark.parametrize("with_bias", [False, True])
def test_packed_linear_equals_f_linear(rows, with_bias):
    torch.manual_seed(0)
    w, b = torch.randn(200, 48), (torch.randn(200) if with_bias else None)
    x = torch.randn(rows, 48)
    packed = PackedLinear(w, b, rows_hint=32)  # the hint is a tuning hint: other row counts work too
    torch.testing.assert_close(packed(x), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed(x.t().contiguous().t()), F.linear(x, w, b), rtol=1e-5, atol=1e-5)  # strided input
    residual = torch.randn(rows, 200)
    torch.testing.assert_close(packed.plus(x, residual), residual + F.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_packed_linear_has_no_graph_and_bf16_falls_back_to_f_linear():
    w = torch.randn(16, 8, requires_grad=True)
    x = torch.randn(4, 8)
    assert not PackedLinear(w, None, rows_hint=4)(x).requires_grad  # sampling-only: no autograd history
    half = PackedLinear(w.detach().to(torch.bfloat16), None, rows_hint=4)
    assert not half.onednn and half(x.to(torch.bfloat16)).dtype == torch.bfloat16
    torch.testing.assert_close(half(x.to(torch.bfloat16)), F.linear(x.to(torch.bfloat16), w.detach().to(torch.bfloat16)))
    r = torch.randn(4, 16, dtype=torch.bfloat16)
    torch.testing.assert_close(half.plus(x.to(torch.bfloat16), r), r + F.linear(x.to(torch.bfloat16), w.detach().to(torch.bfloat16)))
    assert onednn_available(w) == (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
