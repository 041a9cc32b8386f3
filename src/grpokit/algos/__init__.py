"""Pure tensor functions of the GRPO family: advantages, losses, aggregation, KL."""

from grpokit.algos.advantages import ADVANTAGES
from grpokit.algos.aggregation import AGGREGATIONS
from grpokit.algos.kl import KL_ESTIMATORS
from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.algos.objective import grpo_objective

__all__ = ["ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "POLICY_LOSSES", "LossInputs", "grpo_objective"]
