import pytest

from grpokit.config import load_config


@pytest.fixture
def tiny_cfg(tmp_path):
    """A config for the tiny random model: seconds per run."""

    def make(**overrides):
        sets = [
            f"logging.output_dir={tmp_path / 'run'}",
            "logging.progress=false",
            "logging.log_samples_every=0",
            "data.task=arithmetic",
            "data.n_train=20",
            "data.n_heldout=8",
            "rollout.group_size=4",
            "rollout.prompts_per_step=2",
            "rollout.max_new_tokens=6",
            "train.micro_batch_size=4",
            "eval.before=false",
            "eval.after=false",
            "eval.max_new_tokens=6",
        ] + [f"{k}={v}" for k, v in overrides.items()]
        return load_config(overrides=sets)

    return make
