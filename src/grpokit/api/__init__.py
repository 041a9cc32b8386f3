"""Python doors into grpokit: TRL's ``GRPOConfig`` / ``GRPOTrainer`` over the native Trainer.

``from grpokit import GRPOConfig, GRPOTrainer`` (see :mod:`grpokit.api.trl_args` and
:mod:`grpokit.api.trl_trainer`); the native door is ``grpokit.Trainer`` (:mod:`grpokit.trainer.loop`).
"""

from grpokit.api.trl_args import GRPOConfig, UnsupportedArgument
from grpokit.api.trl_trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer", "UnsupportedArgument"]
