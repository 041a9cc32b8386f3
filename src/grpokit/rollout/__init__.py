"""Sampling G completions per prompt."""

from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import GenerationBackend, RolloutBatch, SamplingParams

__all__ = ["GenerationBackend", "HFBackend", "RolloutBatch", "SamplingParams"]
