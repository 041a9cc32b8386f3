"""Importance ratios pi_theta / pi_old per token ``[B, T]``, selected by name.

    token:    r_it = exp(l_it - l^old_it)                                   (PPO, GRPO)
    sequence: s_i  = exp((1/|o_i|) sum_t m_it (l_it - l^old_it)) at every token (GSPO)
    span:     token ratio on the planning span, s_i over the answer span   (TS-GRPO)

A ratio function takes the :class:`~grpokit.algos.losses.LossInputs` and returns a ``[B, T]``
tensor: its value is the ratio each token's loss uses, and its gradient is what that loss
should send to ``logp``. Sequence ratios use GSPO-token's form
``s_it = sg[s_i] * exp(l_it - sg[l_it])`` (arXiv 2507.18071 §4.3): equal in value to s_i, with
gradient s_i * grad l_it at token t only. Summed with weight 1/|o_i| over the sequence (the
``seq_mean_token_mean`` aggregation) that is exactly grad s_i, so GSPO's per-sequence term is
reproduced while every token's loss stays local (chunkable, per-token advantages allowed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from grpokit.registry import Registry

if TYPE_CHECKING:  # losses.py imports this module; the type is only needed for annotations
    from grpokit.algos.losses import LossInputs

# aggregations: the aggregations under which a loss differentiating through the ratio gets the
# method's gradient (None: any); a sequence ratio in GSPO-token form needs the 1/|o_i| weights
RATIOS = Registry("ratio", properties={"aggregations": None})


def seq_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Length-normalised sequence log-ratio (1/|o_i|) sum_t m_it (l_it - l^old_it), ``[B]`` (0 if empty)."""
    return ((logp - old_logp.detach()) * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def broadcast_seq_ratio(logp: torch.Tensor, log_s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO-token form ``[B, T]``: value exp(log_s_i) at every token, gradient s_i * grad l_it where mask = 1."""
    carrier = (logp - logp.detach()) * mask  # value 0, d/dl_it = m_it
    return torch.exp(log_s.detach().unsqueeze(-1) + carrier)


@RATIOS.register("token")
def token_ratio(inp: "LossInputs") -> torch.Tensor:
    """Token ratio r_it = exp(l_it - l^old_it) (PPO; GRPO, arXiv 2402.03300)."""
    return torch.exp(inp.logp - inp.old_logp.detach())


@RATIOS.register("sequence", aggregations=("seq_mean_token_mean",))
def sequence_ratio(inp: "LossInputs") -> torch.Tensor:
    """GSPO sequence ratio s_i = exp(mean_t (l_it - l^old_it)), broadcast to every token.

    "Group Sequence Policy Optimization", arXiv 2507.18071. The geometric mean of the token
    ratios over the masked tokens; expects the ``seq_mean_token_mean`` aggregation (see the
    module docstring).
    """
    return broadcast_seq_ratio(inp.logp, seq_log_ratio(inp.logp, inp.old_logp, inp.mask), inp.mask)


@RATIOS.register("span", inputs=("plan_mask",), aggregations=("seq_mean_token_mean",))
def span_ratio(inp: "LossInputs") -> torch.Tensor:
    """TS-GRPO span ratio: token ratio on the planning span, sequence ratio over the answer span.

    Thinkquel ("A Model Dedicated to Text-to-dbt Using Synthetic Data and a Span-Aware
    Objective", arXiv 2510.00186). ``inp.plan_mask [B, T]`` marks planning tokens; every other
    token of ``mask`` is answer span (tokens in neither span count as answer, an [inferred]
    default) and gets s^S_i = exp((1/|S_i|) sum_{t in S_i} (l_it - l^old_it)) in GSPO-token
    form. Without a ``plan_mask`` this is the 'sequence' ratio.
    """
    if inp.plan_mask is None:
        return sequence_ratio(inp)
    plan = inp.plan_mask.to(inp.mask.dtype) * inp.mask
    answer = inp.mask - plan
    seq = broadcast_seq_ratio(inp.logp, seq_log_ratio(inp.logp, inp.old_logp, answer), answer)
    return torch.where(plan > 0, token_ratio(inp), seq)
