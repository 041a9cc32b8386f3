"""The tied embedding / LM head gradient added into ``.grad`` in place, without ``[V, H]`` temporaries.

For a model whose input embedding and LM head share one ``[V, H]`` matrix (SmolLM2: 49152 x 576,
108 MiB in fp32), autograd builds two dense ``[V, H]`` gradients per micro-batch: the head's
``dL/dW`` and the embedding lookup's dense backward (``embedding_dense_backward``), and holds the
first in its input buffer until the second arrives at the very end of the backward. Inside
:func:`in_place_embedding_grads` (with ``.grad`` already allocated, see
:func:`grpokit.trainer.memory.allocate_gradients`):

* the chunked LM head (:mod:`grpokit.model.chunked_head`) adds each chunk's ``gz^T h`` straight
  into ``weight.grad`` and returns no weight gradient to autograd;
* the input embedding runs with ``sparse=True``: its gradient is the looked-up rows only, which
  autograd adds into the dense ``.grad`` in place.

The gradient is the same sum; the learner's peak RSS drops by ~0.1 GiB (measured at 16 x 64 tokens).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import torch

_state = {"active": False}


def head_grad_in_place(weight: torch.Tensor) -> bool:
    """Whether the chunked head should add its weight gradient into ``weight.grad`` itself."""
    return _state["active"] and weight.is_leaf and weight.grad is not None and not weight.grad.is_sparse and not _sharded(weight)


def _sharded(weight: torch.Tensor) -> bool:
    """An FSDP shard (DTensor): its gradient arrives by reduce-scatter, never in place."""
    dtensor = sys.modules.get("torch.distributed.tensor")  # loaded whenever a model is sharded
    return dtensor is not None and isinstance(weight, dtensor.DTensor)


@contextmanager
def in_place_embedding_grads(model: torch.nn.Module) -> Iterator[None]:
    """Within the block (forward and backward), embedding and head gradients go into ``.grad`` in place."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    sparse = (
        type(embedding) is torch.nn.Embedding and embedding.weight.requires_grad and embedding.weight.grad is not None
        and embedding.max_norm is None and not _sharded(embedding.weight)
    )
    was_sparse = embedding.sparse if sparse else None
    previous = _state["active"]
    _state["active"] = True
    if sparse:
        embedding.sparse = True
    try:
        yield
    finally:
        _state["active"] = previous
        if sparse:
            embedding.sparse = was_sparse
