"""grpokit: GRPO and its variants for Hugging Face causal language models."""

__version__ = "0.1.0"
