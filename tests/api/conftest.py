import pytest

from grpokit.testing import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama with its ChatML tokenizer, saved as a model folder (what a TRL script names by path)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def short_args(tmp_path):
    """GRPOConfig keywords for a run of seconds on the tiny model."""
    return dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2, max_steps=2,
                max_completion_length=8, logging_steps=1, gradient_checkpointing=False, disable_tqdm=True)
