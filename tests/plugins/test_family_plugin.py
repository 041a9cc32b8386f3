"""A policy family defined outside grpokit trains end to end, registered by ``module:object`` or an entry point.

The family (``tests/plugins/toy_family.py``) is a position-wise digit policy, pi = prod_t
softmax(logits[t]); the reward is the share of 7s. GRPO must move probability onto the digit 7
(the family's own ``toy/p_seven`` metric is exactly 1/10 at the zero logits it starts from), through
nothing but the Family and Policy interfaces: no grpokit file names the family.
"""

import json
import sys
from pathlib import Path

import pytest

from grpokit import builtins
from grpokit.config import load_config
from grpokit.families import FAMILIES
from grpokit.trainer.inputs import RunContractError
from grpokit.trainer.loop import Trainer

HERE = Path(__file__).parent
FAMILY_FILE = HERE / "toy_family.py"
BASE = [
    "logging.progress=false", "logging.log_samples_every=0", "data.task=arithmetic", "data.n_train=8", "data.n_heldout=2",
    "rollout.group_size=16", "rollout.prompts_per_step=4", "rollout.max_new_tokens=6", "train.micro_batch_size=64",
    "train.max_minutes=0", "eval.before=false", "eval.after=true", "eval.max_new_tokens=6", "optim.lr=0.3",
    "optim.warmup_steps=0", "algorithm.beta=0.0",
]


def sevens(prompts, completions, **_):
    """The share of 7s in each completion (1.0 = all sevens, the accuracy judge's 'correct')."""
    return [c.count("7") / max(len(c), 1) for c in completions]


@pytest.fixture
def clean_registry(monkeypatch):
    builtins.load_plugins()
    monkeypatch.setattr(FAMILIES, "_families", dict(FAMILIES._families))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if "toy_family" in name:
            del sys.modules[name]


def _train(tmp_path, family: str, steps: int = 20):
    overrides = BASE + [f"model.family={family}", "model.name=toy-digits", f"logging.output_dir={tmp_path}",
                        f"train.steps={steps}", f"rewards=[{{name: '{__file__}:sevens'}}]"]
    trainer = Trainer(load_config(preset="grpo", overrides=overrides))
    result = trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return trainer, result, [r for r in rows if "toy/p_seven" in r]


def test_a_family_named_by_module_object_trains_and_moves_its_own_policy(tmp_path, clean_registry):
    trainer, result, rows = _train(tmp_path, f"{FAMILY_FILE}:ToyDigits")
    assert type(trainer.family).__name__ == "ToyDigits" and type(trainer.policy).__name__ == "DigitsPolicy"
    assert 0.1 < rows[0]["toy/p_seven"] < 0.2  # after one update from uniform logits (exactly 0.1 before it)
    assert rows[-1]["toy/p_seven"] > 0.5  # GRPO moved the digit distribution onto 7
    assert result["after"]["accuracy"] == 1.0  # greedy = arg-max: all sevens
    assert (tmp_path / "checkpoints").is_dir() and list((tmp_path / "checkpoints").glob("*/model.safetensors"))


def test_a_family_from_an_entry_point_is_claimed_by_auto(tmp_path, clean_registry, monkeypatch):
    dist = tmp_path / "site" / "toy_family_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-family-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[grpokit.plugins]\ntoy_family = toy_family:register\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setattr(builtins, "_loaded", False)
    assert "toy_digits" in FAMILIES.names()  # loaded with the built-ins, no grpokit file edited
    assert FAMILIES.for_name("toy-digits").name == "toy_digits"
    trainer, _, rows = _train(tmp_path / "run", "auto", steps=4)
    assert trainer.cfg.model.family == "toy_digits"  # auto's pick is recorded in the run's config
    assert rows[-1]["toy/p_seven"] > rows[0]["toy/p_seven"]


def test_a_family_check_refuses_in_one_line_before_loading(tmp_path, clean_registry):
    overrides = BASE + [f"model.family={FAMILY_FILE}:ToyDigits", "model.name=toy-digits", f"logging.output_dir={tmp_path}",
                        "environment.name=guess_number", "data.task=null", f"rewards=[{{name: '{__file__}:sevens'}}]"]
    with pytest.raises((RunContractError, ValueError), match="toy digits family has no episodes"):
        Trainer(load_config(preset="grpo", overrides=overrides))


def test_auto_refuses_a_tie_between_two_specific_claimants(clean_registry):
    from grpokit.families import Claim, Family

    class Greedy(Family):
        name = "greedy_claimant"

        def claim(self, model_name):
            return Claim.SPECIFIC

    FAMILIES.register(Greedy())
    with pytest.raises(ValueError, match=r"claimed by the families \['greedy_claimant', 'vision_lm'\] alike: set model.family"):
        FAMILIES.for_name("tiny-qwen2vl")
