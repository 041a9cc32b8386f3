"""grpokit: GRPO and its variants for Hugging Face causal language models."""

__version__ = "0.1.0"

# The Python API, imported on first use so that `import grpokit` loads no torch and makes no import cycle:
# TRL's names (GRPOConfig, GRPOTrainer: grpokit.api) and the native ones (Trainer, Config, load_config).
_LAZY = {
    "GRPOConfig": "grpokit.api.trl_args",
    "GRPOTrainer": "grpokit.api.trl_trainer",
    "UnsupportedArgument": "grpokit.api.trl_args",
    "Trainer": "grpokit.trainer.loop",
    "Config": "grpokit.config.schema",
    "load_config": "grpokit.config.loading",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'grpokit' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)
