"""logging.report_to in each of TRL's forms: a name, a list, "all", "none"; normalised to a list at load."""

import pytest

from grpokit.config import ConfigError, load_config
from grpokit.trainer import metrics as metrics_mod


def report_to(value: str) -> list:
    return load_config(overrides=[f"logging.report_to={value}"]).logging.report_to


def test_a_single_name_as_trl_writes_it_becomes_a_one_item_list():
    assert report_to("trackio") == ["trackio"]
    assert report_to("[tensorboard, wandb]") == ["tensorboard", "wandb"]


def test_none_in_every_spelling_is_no_tracker():
    assert report_to("none") == report_to("[none]") == report_to("[]") == report_to("null") == []


def test_all_is_every_installed_tracker(monkeypatch):
    monkeypatch.setattr(metrics_mod, "_installed", lambda module: module in ("tensorboard", "wandb"))
    assert report_to("all") == report_to("[all]") == ["tensorboard", "wandb"]
    monkeypatch.setattr(metrics_mod, "_installed", lambda module: False)
    assert report_to("all") == []


def test_a_yaml_file_with_a_plain_string(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("logging:\n  report_to: trackio\n")
    assert load_config(str(path)).logging.report_to == ["trackio"]


@pytest.mark.parametrize("value, message", [
    ("mlflow", "logging.report_to item 'mlflow' is not allowed; choose one of: none, tensorboard, trackio, wandb"),
    ("[all, wandb]", "logging.report_to: 'all' cannot be combined with tracker names ['all', 'wandb']: give all alone or the trackers"),
    ("[none, trackio]", "logging.report_to: 'none' cannot be combined with tracker names ['none', 'trackio']: give none alone or the trackers"),
    ("3", "logging.report_to: give a tracker name (tensorboard, trackio, wandb, all, none) or a list of them, got 3"),
])
def test_unknown_names_and_mixed_words_are_one_line_refusals(value, message):
    with pytest.raises(ConfigError) as info:
        report_to(value)
    assert str(info.value) == message
