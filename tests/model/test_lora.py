"""LoRA target modules: every name a user chose must match a module of the model."""

import pytest

from grpokit.config.schema import LoraConfig
from grpokit.model.lora import apply_lora
from grpokit.testing import tiny_model_and_tokenizer


def test_a_chosen_target_that_matches_no_module_is_refused_naming_it():
    model, _ = tiny_model_and_tokenizer(seed=0)
    with pytest.raises(ValueError, match=r"model.lora.target_modules: \['q_prj'\] match no module of this model"):
        apply_lora(model, LoraConfig(enabled=True, target_modules=["q_proj", "q_prj"]))


def test_the_default_targets_and_a_matching_choice_get_adapters():
    model, _ = tiny_model_and_tokenizer(seed=0)
    wrapped = apply_lora(model, LoraConfig(enabled=True, target_modules=["q_proj", "v_proj"]))
    adapted = {n.split(".")[-2] for n, _ in wrapped.named_modules() if n.endswith("lora_A")}
    assert adapted == {"q_proj", "v_proj"}
    model, _ = tiny_model_and_tokenizer(seed=0)
    assert apply_lora(model, LoraConfig(enabled=True)).peft_config["default"].target_modules
