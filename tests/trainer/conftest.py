import pytest
import torch

from grpokit.config import load_config
from grpokit.families.causal_lm.policy import CausalLMPolicy
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer


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


@pytest.fixture(scope="module")
def rollout():
    """(policy, batch): 2 prompts x 4 sampled completions of the tiny model (the accumulation tests' batch)."""
    torch.manual_seed(0)
    model, tok = tiny_model_and_tokenizer(seed=0)
    backend = HFBackend(model, tok)
    policy = CausalLMPolicy(model, tok, backend)
    rows = [{"prompt": "ab", "answer": "1"}, {"prompt": "hello there", "answer": "2"}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    batch = backend.generate(texts, rows, 4, SamplingParams(max_new_tokens=6, temperature=1.0))
    return policy, batch
