import pytest

from grpokit.config import Config, ConfigError, load_config, preset_names
from grpokit.config.loading import field_docs


def test_defaults_are_valid_and_documented():
    cfg = load_config()
    assert isinstance(cfg, Config)
    for name, doc, _ in field_docs():
        assert doc, f"config field {name} has no doc"


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  steps: 7\nalgorithm:\n  beta: 0.1\n")
    cfg = load_config(str(path), overrides=["train.steps=9", "rollout.temperature=0.5"])
    assert cfg.train.steps == 9
    assert cfg.algorithm.beta == pytest.approx(0.1)
    assert cfg.rollout.temperature == pytest.approx(0.5)


def test_preset_inside_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("preset: dr_grpo\ntrain:\n  steps: 2\n")
    cfg = load_config(str(path))
    assert cfg.algorithm.aggregation == "constant"
    assert cfg.train.steps == 2


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("algorithm.betta=1", "did you mean 'algorithm.beta'"),
        ("train.steps=0", "train.steps = 0 is out of range"),
        ("rollout.temperature=hot", "rollout.temperature must be a number"),
        ("algorithm.loss=nope", "algorithm.loss = 'nope' is not a registered loss"),
        ("algorithm.aggregation=x", "is not a registered aggregation"),
        ("model.dtype=int8", "model.dtype = 'int8' is not allowed"),
        ("rewards=[{name: answer_match, wieght: 2}]", "rewards[0].wieght"),
        ("train.micro_batch_size=2.5", "train.micro_batch_size must be an integer"),
        ("data.task=unknown_task", "is not a registered task"),
        ("nonsense", "must look like section.field=value"),
    ],
)
def test_bad_values_name_the_field(override, fragment):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override])
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(bad))


def test_every_preset_loads():
    assert "demo" in preset_names()
    for name in preset_names():
        load_config(preset=name)
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config(preset="nope")


def test_exponent_floats_without_a_dot_are_numbers(tmp_path):
    """YAML 1.1 reads 1e-6 as the string '1e-6'; a float field takes it as the number (d3cb0f9 refused it)."""
    cfg = load_config(overrides=["optim.lr=1e-6", "algorithm.beta=4E-2"])
    assert cfg.optim.lr == 1e-6 and cfg.algorithm.beta == 0.04
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 5e-5\n")
    assert load_config(path).optim.lr == 5e-5
    with pytest.raises(ConfigError, match="optim.lr must be a number"):
        load_config(overrides=["optim.lr=fast"])


def test_exponent_floats_in_option_mappings_are_numbers(tmp_path):
    """Option mappings are untyped: before, ``loss_options: {delta: 1e-4}`` reached DisCO as the string '1e-4'."""
    cfg = load_config(overrides=["algorithm.loss=disco", "algorithm.loss_options={delta: 1e-8, constraint_beta: 2E3, score: log_l}"])
    assert cfg.algorithm.loss_options == {"delta": 1e-8, "constraint_beta": 2000.0, "score": "log_l"}
    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  loss: disco\n  loss_options:\n    delta: 1e-2\n    tau: '1e1'\n")
    assert load_config(path).algorithm.loss_options == {"delta": 0.01, "tau": "1e1"}  # quoted: the user's string
