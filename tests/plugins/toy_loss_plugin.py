"""A policy loss defined outside grpokit, registered the way a third-party plugin registers one.

tests/plugins/test_third_party_plugins.py loads it through a ``grpokit.plugins`` entry point and
through a config's ``plugins`` list; no grpokit file names it.
"""

import torch

from grpokit.algos.losses import POLICY_LOSSES, LossInputs


@POLICY_LOSSES.register("toy_reinforce", zero_advantage_zero_gradient=True)
def toy_reinforce(inp: LossInputs, *, scale: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Scaled REINFORCE: -scale * A * logp per token (no ratio, no clip); on-policy its gradient is scale x GRPO's.

    Williams, "Simple statistical gradient-following algorithms for connectionist reinforcement
    learning", Machine Learning 8 (1992). At ratio 1 (one update per batch) PPO-clip's gradient is
    -A grad logp, so this loss's gradient is exactly ``scale`` times it.
    """
    loss = -scale * inp.token_adv().detach() * inp.logp  # [B, T]
    return loss, {"toy/scale": torch.tensor(float(scale), device=inp.logp.device)}
