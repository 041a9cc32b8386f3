"""ESPO's sequence-level KL penalty on a policy whose units split one sequence log-likelihood.

"Principled RL for Diffusion LLMs Emerges from a Sequence-Level Perspective" (Ou et al.,
arXiv 2512.03759; authors' ``espo/espo_trainer.py``). With the ELBO split over the L canvas
positions (``[B, L]`` units whose row sum is the ELBO, all L units in the mask; see the
masked-diffusion likelihood ``espo_elbo``), the rest of ESPO is generic: GSPO's sequence ratio
(``algorithm.ratio=sequence``) is exp((ELBO - ELBO_old) / L), ``ppo_clip`` with
``seq_mean_token_mean`` aggregation is ESPO's -(1/B) sum_i min(rho_i A_i, clip(rho_i) A_i), and the
leave-one-out advantage is ``rloo``. What is ESPO's own is the KL: a quadratic ("k2") penalty on
the *sequence* log-ratio, beta (1/(B L)) sum_i (ELBO_i - ELBO_ref_i)^2 / 2, which never
exponentiates a large sequence-level difference (unlike k3).
"""

from __future__ import annotations

import torch

from grpokit.algos.kl import KL_ESTIMATORS


@KL_ESTIMATORS.register("seq_k2", inputs=("ref_logp",))
def kl_seq_k2(logp: torch.Tensor, ref_logp: torch.Tensor, *, clamp: bool = False) -> torch.Tensor:
    """Sequence k2 (ESPO): every unit of row i holds D_i^2 / (2 L), D_i = sum_t (logp - ref_logp), L = units per row.

    logp, ref_logp: ``[B, L]``, every unit in the loss mask (a sequence-unit policy). With the
    ``seq_mean_token_mean`` aggregation the term is (1/B) sum_i D_i^2 / (2 L), ESPO's KL. ``clamp``
    (verl's log-ratio clamp) clamps D to [-20 L, 20 L].
    """
    length = logp.shape[-1]
    d = (logp - ref_logp).sum(-1)  # [B]
    if clamp:
        d = d.clamp(-20.0 * length, 20.0 * length)
    return (0.5 * d**2 / length)[:, None].expand_as(logp)
