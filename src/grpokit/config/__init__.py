"""Typed run configuration: schema, YAML loading, presets, overrides."""

from grpokit.config.loading import ConfigError, dump_yaml, load_config, preset_names
from grpokit.config.schema import (
    AlgorithmConfig,
    Config,
    DataConfig,
    EvalConfig,
    LoggingConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    TrainConfig,
)

__all__ = [
    "AlgorithmConfig", "Config", "ConfigError", "DataConfig", "EvalConfig", "LoggingConfig",
    "LoraConfig", "ModelConfig", "OptimConfig", "RewardConfig", "RolloutConfig", "TrainConfig",
    "dump_yaml", "load_config", "preset_names",
]
