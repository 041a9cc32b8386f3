"""A config that starts from a preset does not inherit the preset's description (it says "from preset X")."""

import yaml

from grpokit.config import load_config
from grpokit.config import loading
from grpokit.config.loading import read_preset


def _file(tmp_path, data):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_file_naming_a_preset_says_from_preset(tmp_path):
    path = _file(tmp_path, {"preset": "dapo", "train": {"steps": 3}})
    cfg = load_config(path)
    assert cfg.description == "from preset dapo"
    assert cfg.algorithm.epsilon_high == 0.28  # the preset's settings still apply (DAPO's clip-higher)


def test_a_file_on_the_preset_flag_says_from_preset(tmp_path):
    assert load_config(_file(tmp_path, {"train": {"steps": 3}}), preset="gspo").description == "from preset gspo"


def test_a_files_own_description_is_kept(tmp_path):
    path = _file(tmp_path, {"preset": "dapo", "description": "my DAPO run on sums"})
    assert load_config(path).description == "my DAPO run on sums"


def test_the_preset_alone_keeps_its_description():
    assert load_config(preset="dapo").description.startswith("DAPO (arXiv 2503.14476)")
    assert load_config(preset="dapo", overrides=["description=x"]).description == "x"


def test_a_preset_without_a_description_does_not_take_its_bases(tmp_path, monkeypatch):
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "base.yaml").write_text("description: the base method\ntrain: {steps: 7}\n")
    (presets / "child.yaml").write_text("preset: base\ntrain: {seed: 3}\n")
    monkeypatch.setattr(loading.resources, "files", lambda package: tmp_path)
    assert read_preset("child") == {"description": "from preset base", "train": {"steps": 7, "seed": 3}}
    assert read_preset("base")["description"] == "the base method"
