"""Third-party plugins: a loss defined outside grpokit registers through an entry point or a config's ``plugins``.

The loss (``tests/plugins/toy_loss_plugin.py``) is scaled REINFORCE, -scale * A * logp. On-policy
(one update per batch, ratio 1) PPO-clip's gradient is -A grad logp, so at the same seed the
first step's gradient norm of ``toy_reinforce`` with scale 3 is exactly 3 x that of ``ppo_clip``.
"""

import json
import sys
from pathlib import Path

import pytest

from grpokit import builtins
from grpokit.algos.losses import POLICY_LOSSES
from grpokit.config import load_config
from grpokit.config.loading import ConfigError
from grpokit.plugins import PluginError
from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer

HERE = Path(__file__).parent
REPO = HERE.parent.parent
TOY = "toy_reinforce"


def char_code(prompts, completions, **_):
    """A reward that differs between any two completions almost surely (the advantages are not all 0): sum of codes mod 7."""
    return [(sum(map(ord, c)) % 7) / 6 for c in completions]


@pytest.fixture
def isolated(monkeypatch):
    """The loss registry, the loaded flag and the plugin's modules as they were before the test."""
    builtins.load_plugins()
    monkeypatch.setattr(POLICY_LOSSES, "_specs", dict(POLICY_LOSSES._specs))
    before = set(sys.modules)
    monkeypatch.chdir(REPO)
    yield
    for name in set(sys.modules) - before:
        if "toy_loss_plugin" in name or name.startswith("toy_entry_"):
            del sys.modules[name]


def fake_distribution(folder: Path, entry_points: str, monkeypatch) -> None:
    """``folder/toy_plugin-0.1.dist-info`` declaring ``[grpokit.plugins]`` entry points, found on sys.path; plugins reload."""
    info = folder / "toy_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[grpokit.plugins]\n{entry_points}\n")
    monkeypatch.syspath_prepend(str(folder))  # also invalidates importlib's caches (importlib.metadata's path cache too)
    monkeypatch.setattr(builtins, "_loaded", False)


def train_two_steps(out: Path, *overrides: str) -> list[dict]:
    """metrics.jsonl rows of a 2-step run of the tiny random model (seed 0, no KL, one update per batch)."""
    cfg = load_config(overrides=[
        f"logging.output_dir={out}", "logging.progress=false", "logging.log_samples_every=0",
        "data.task=arithmetic", "data.n_train=20", "data.n_heldout=8",
        "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=6", "rollout.temperature=1.0",
        "train.micro_batch_size=8", "train.steps=2", "optim.lr=0.01", "algorithm.beta=0.0", "algorithm.num_iterations=1",
        "eval.before=false", "eval.after=false", f"rewards=[{{name: '{__file__}:char_code'}}]", *overrides,
    ])
    model, tok = tiny_model_and_tokenizer(seed=0)
    Trainer(cfg, model=model, tokenizer=tok).train()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def grpo_rows(tmp_path_factory):
    return train_two_steps(tmp_path_factory.mktemp("grpo") / "run")


def assert_toy_loss_acted(rows: list[dict], grpo_rows: list[dict]) -> None:
    assert len(rows) == 2 and len(grpo_rows) == 2
    assert rows[0]["toy/scale"] == 3.0 and "clip/frac" not in rows[0]  # its own metric, not ppo_clip's
    assert grpo_rows[0]["grad_norm"] > 0  # same seed, same first batch: the advantages are not all zero
    # on-policy: grad(-3 A logp) = 3 x grad(-min(r A, clip(r) A)) at r = 1
    assert rows[0]["grad_norm"] == pytest.approx(3.0 * grpo_rows[0]["grad_norm"], rel=1e-4)
    assert rows[0]["reward/mean"] == pytest.approx(grpo_rows[0]["reward/mean"])  # same rollouts at step 1


def test_loss_registered_through_an_entry_point_trains(isolated, tmp_path, monkeypatch, grpo_rows):
    monkeypatch.syspath_prepend(str(HERE))  # where the entry point's module lives
    fake_distribution(tmp_path / "site", "toy = toy_loss_plugin", monkeypatch)
    assert TOY not in POLICY_LOSSES._specs
    rows = train_two_steps(tmp_path / "run", f"algorithm.loss={TOY}", "algorithm.loss_options={scale: 3.0}")
    assert_toy_loss_acted(rows, grpo_rows)


def test_loss_registered_through_config_plugins_trains(isolated, tmp_path, grpo_rows):
    assert TOY not in POLICY_LOSSES._specs
    with pytest.raises(ConfigError, match=f"algorithm.loss = '{TOY}' is not a registered loss"):
        load_config(overrides=[f"algorithm.loss={TOY}"])  # without the plugin the name is unknown
    rows = train_two_steps(tmp_path / "run", "plugins=[tests/plugins/toy_loss_plugin.py]", f"algorithm.loss={TOY}",
                           "algorithm.loss_options={scale: 3.0}")
    assert_toy_loss_acted(rows, grpo_rows)


def test_config_plugins_load_before_names_are_checked_whatever_the_key_order(isolated):
    cfg = load_config(overrides=[f"algorithm.loss={TOY}", "plugins=[tests/plugins/toy_loss_plugin.py]"])
    assert cfg.algorithm.loss == TOY and cfg.plugins == ["tests/plugins/toy_loss_plugin.py"]


def test_entry_point_function_is_called_with_no_arguments(isolated, tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "toy_entry_fn.py").write_text("CALLS = []\n\ndef setup():\n    CALLS.append('called')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    fake_distribution(tmp_path / "site", "toy_fn = toy_entry_fn:setup", monkeypatch)
    builtins.load_plugins()
    builtins.load_plugins()  # once only
    assert sys.modules["toy_entry_fn"].CALLS == ["called"]


def test_entry_points_load_after_the_built_ins_and_may_look_a_registry_up(isolated, tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "toy_entry_lookup.py").write_text(
        "from grpokit.algos.losses import POLICY_LOSSES\nNAMES = POLICY_LOSSES.names()  # during load_plugins: no recursion\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    fake_distribution(tmp_path / "site", "lookup = toy_entry_lookup", monkeypatch)
    assert "ppo_clip" in POLICY_LOSSES
    assert {"disco", "cispo", "ppo_clip"} <= set(sys.modules["toy_entry_lookup"].NAMES)  # the built-ins were already in


def test_failing_entry_point_is_one_line_naming_it_and_its_distribution(isolated, tmp_path, monkeypatch):
    fake_distribution(tmp_path / "site", "broken = toy_entry_missing_module", monkeypatch)
    with pytest.raises(PluginError) as info:
        POLICY_LOSSES.names()  # any lookup loads the plugins
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("grpokit plugin 'broken = toy_entry_missing_module' (entry point of distribution 'toy_plugin 0.1') "
                              "failed to load: ModuleNotFoundError: No module named 'toy_entry_missing_module'")
    assert builtins._loaded is False  # the next lookup raises again rather than seeing a half-filled registry


@pytest.mark.parametrize("plugins, match", [
    ("[tests/plugins/no_such_file.py]", r"^plugins\[0\] 'tests/plugins/no_such_file.py': file not found: "),
    ("[toy_no_such_module]", r"^plugins\[0\] 'toy_no_such_module': cannot import module 'toy_no_such_module'"),
    ("tests/plugins/toy_loss_plugin.py", r"^plugins must be a list of module names or path/to/file.py"),
])
def test_bad_config_plugins_are_one_line_config_errors(isolated, plugins, match):
    with pytest.raises(ConfigError, match=match):
        load_config(overrides=[f"plugins={plugins}"])


def test_a_plugin_taking_a_built_in_name_is_refused_naming_it(isolated, tmp_path):
    clash = tmp_path / "clash.py"
    clash.write_text("from grpokit.algos.losses import POLICY_LOSSES\n\n@POLICY_LOSSES.register('ppo_clip')\ndef mine(inp):\n    pass\n")
    with pytest.raises(ConfigError, match=r"importing .*clash.py failed: ValueError: loss 'ppo_clip' is already registered"):
        load_config(overrides=[f"plugins=[{clash}]"])
