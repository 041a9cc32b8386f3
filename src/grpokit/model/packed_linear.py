"""``x W^T + b`` with the weight copied once into oneDNN's blocked layout (CPU, float32).

For the shapes of decoding (``[B, H] x [H, N]`` with B = tens of rows) and of the LM head
(``N`` = 49k vocabulary), MKL's sgemm behind ``F.linear`` runs at a fraction of its large-GEMM
rate on the dev machine's AMD EPYC CPU, while oneDNN's AVX2 kernels on a prepacked weight do not
(measured, 2 threads, GFLOP/s, ``F.linear`` -> packed): ``[32, 576] x [576, 49152]`` 30 -> 75,
``[128, 576] x [576, 49152]`` 60 -> 130, ``[32, 576] x [576, 3072]`` 65 -> 121,
``[1024, 576] x [576, 3072]`` 94 -> 144. Packing copies the weight (~10 ms per 14 MB), so it pays
when a weight is used for many products: a whole decode, or all chunks of the LM head.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def onednn_available(weight: torch.Tensor) -> bool:
    """Whether oneDNN's packed fp32 linear can run this weight (CPU, float32, MKLDNN built in)."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear:
    """``y = x W^T + b`` with ``W [N, K]`` copied once into the fastest layout for ``x [M, K]``."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], rows_hint: int) -> None:
        weight = weight.detach()
        self.bias = bias.detach().contiguous() if bias is not None else None
        self.onednn = onednn_available(weight)
        if self.onednn:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows_hint)
        else:
            self.weight = weight.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def plus(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + x W^T + b`` in one kernel (oneDNN's binary post-op): a residual connection."""
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise.binary(x.contiguous(), residual.contiguous(), self.weight, self.bias, "add")
        return F.linear(x, self.weight, self.bias).add_(residual)
