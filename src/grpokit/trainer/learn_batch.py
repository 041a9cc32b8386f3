"""The learner's one typed input: a full batch of named, shape-annotated tensors.

The rollout batch carries the model inputs; everything else a loss may read is a named field
here, filled by the producers of :mod:`grpokit.trainer.inputs` before the update and sliced per
micro-batch (rows never straddle micro-batches, columns are cut to the micro-batch's longest
row). Unset optional fields are None; a loss that declares one as an input never sees None,
because the run is refused at load time when nothing produces it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

import torch

from grpokit.rollout.types import RolloutBatch

# Fields sliced as [rows] (per sample), [rows, :U] (per unit) or passed whole (scalars).
PER_ROW = ("adv", "rewards", "verif_adv")
PER_UNIT = ("mask", "token_weights", "behaviour_logp", "old_logp", "prev_logp", "ref_logp", "teacher_logp", "aux_logp",
            "plan_mask", "verif_mask")
SCALAR = ("constraint_kl",)


@dataclass
class LearnBatch:
    """One update's inputs, B rows by U units (U = the widest row's units).

    rollout:        the sampled batch (model inputs, group ids, texts)
    adv:            [B] or [B, U] advantages
    mask:           [B, U] 1 = the unit counts in the loss (the unit mask, minus excluded rows)
    rewards:        [B] the scalar reward each advantage was computed from
    behaviour_logp: [B, U] log-probs under the distribution that sampled each unit
    token_weights:  [B, U] per-unit weights multiplying the unit loss (None = all 1)
    old_logp:       [B, U] proximal policy (pre-update weights), recomputed when mu > 1
    prev_logp:      [B, U] the policy one update behind the batch's first update (previous iteration)
    ref_logp:       [B, U] reference policy;  teacher_logp: [B, U] distillation teacher
    aux_logp:       [B, U] log-probs under a transformed condition (masked image)
    plan_mask:      [B, U] 1 = planning-span unit;  verif_mask: [B, U] 1 = self-verification unit
    verif_adv:      [B] advantages of the verification rows
    constraint_kl:  [] batch token-mean KL(old || current) at the current weights (per iteration)
    num_seqs:       the normaliser of sequence-mean aggregations (the number of solutions)
    """

    rollout: RolloutBatch
    adv: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    behaviour_logp: torch.Tensor
    token_weights: Optional[torch.Tensor] = None
    old_logp: Optional[torch.Tensor] = None
    prev_logp: Optional[torch.Tensor] = None
    ref_logp: Optional[torch.Tensor] = None
    teacher_logp: Optional[torch.Tensor] = None
    aux_logp: Optional[torch.Tensor] = None
    plan_mask: Optional[torch.Tensor] = None
    verif_mask: Optional[torch.Tensor] = None
    verif_adv: Optional[torch.Tensor] = None
    constraint_kl: Optional[torch.Tensor] = None
    num_seqs: Optional[float] = None

    def __len__(self) -> int:
        return len(self.rollout)

    @property
    def num_tokens(self) -> float:
        """Loss units of the whole batch (the normaliser of token-mean aggregations)."""
        return float(self.mask.sum().clamp(min=1))

    def set_rows(self, name: str, rows: torch.Tensor, values: torch.Tensor) -> None:
        """Write ``values [b, u]`` (a micro-batch's scores) into per-unit field ``name`` at ``rows``, allocating it."""
        full = getattr(self, name)
        if full is None:
            full = torch.zeros(self.mask.shape, dtype=values.dtype, device=values.device)
            setattr(self, name, full)
        full[rows, : values.shape[1]] = values

    def row_adv(self) -> torch.Tensor:
        """``[B]`` one advantage per row: ``adv`` itself, or its mean over the row's loss tokens when it is per unit."""
        if self.adv.dim() == 1:
            return self.adv
        mask = self.mask.to(self.adv.dtype)
        return (self.adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)

    def select(self, rows: torch.Tensor) -> "LearnBatch":
        """Mini-batch ``rows [b]`` (whole groups, see :func:`mini_batch_rows`): every field with those rows, same width.

        Its loss is normalised on its own (token and sequence counts of the mini-batch), as one
        optimizer update of TRL's ``steps_per_generation`` or verl's ``ppo_mini_batch_size``.
        """
        if self.num_seqs is not None:  # the check at load time refuses these runs
            raise ValueError("a batch with its own sequence normaliser (self-verification rows) is not split into mini-batches")
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "rollout":
                out[f.name] = value.select(rows)
            elif f.name in PER_UNIT or f.name in PER_ROW:
                out[f.name] = None if value is None else value[rows]
            else:
                out[f.name] = value
        return LearnBatch(**out)

    def micro(self, rows: torch.Tensor, units: int) -> dict[str, Optional[torch.Tensor]]:
        """The fields of micro-batch ``rows``, per-unit ones cut to ``units`` columns (None stays None)."""
        out: dict[str, Optional[torch.Tensor]] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in PER_UNIT:
                out[f.name] = value[rows, :units] if value is not None else None
            elif f.name in PER_ROW:  # adv may be per unit too
                out[f.name] = None if value is None else (value[rows, :units] if value.dim() == 2 else value[rows])
            elif f.name in SCALAR:
                out[f.name] = value
        return out


def mini_batch_rows(group_ids: torch.Tensor, k: int, seed: int) -> list[torch.Tensor]:
    """``k`` row-index tensors ``[b_i]`` of whole groups covering the batch once, for ``k`` optimizer updates.

    group_ids: ``[B]`` (each group's rows adjacent). The groups are put in a random order drawn
    from ``seed`` (on the CPU, so every rank and a resumed run draw the same) and cut into ``k``
    runs of near-equal group counts (``torch.tensor_split``: the first ``G mod k`` runs take one
    more); each run's rows keep their batch order, so its groups stay adjacent. With fewer
    groups than ``k`` the last runs are empty. Whole groups, because group-wise losses (DisCO)
    compare a group's rows inside one loss call, as TRL and verl split whole samples.
    """
    labels = torch.unique(group_ids).cpu()
    order = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed), device="cpu")]  # the CPU draw on any device
    return [torch.isin(group_ids, run.to(group_ids.device)).nonzero().squeeze(-1) for run in torch.tensor_split(order, k)]
