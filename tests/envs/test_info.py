"""An environment's info: which values become metrics, under which names, and what the env_info reward reads."""

import numpy as np
import pytest
import torch

from grpokit.envs.info import info_number, metric_name
from grpokit.rewards.builtin import REWARDS


def test_numbers_and_bools_are_metrics_numpy_and_torch_scalars_included_and_nothing_else_is():
    assert [info_number(v) for v in (True, False, 3, 0.25, np.bool_(True), np.float32(0.5), np.int64(7), torch.tensor(2.5))] == \
        [1.0, 0.0, 3.0, 0.25, 1.0, 0.5, 7.0, 2.5]
    assert [info_number(v) for v in ("1", None, [1], {"a": 1}, np.array([1, 2]))] == [None] * 5


def test_grpokits_own_metric_names_are_renamed_and_the_renaming_never_merges_two_keys():
    assert metric_name("success") == "env/success"
    assert metric_name("turns") == "env/info/turns" and metric_name("return") == "env/info/return"
    assert metric_name("failed_frac") == "env/info/failed_frac"
    # "info/turns" would otherwise land on the renamed "turns"
    assert metric_name("info/turns") == "env/info/info/turns" != metric_name("turns")


def test_env_info_reads_the_episodes_info_of_every_type():
    info = REWARDS.get("env_info")
    infos = [{"solved": True, "label": "x"}, {"solved": np.float32(0.5)}, {}, None]  # a failed episode reported nothing
    ended = [True, True, False, False]
    assert info(["p"] * 4, ["a"] * 4, key="solved", env_info=infos, env_done=ended) == [1.0, 0.5, None, None]
    with pytest.raises(ValueError, match=r"info\['label'\] is a str, not a number or bool"):
        info(["p"] * 4, ["a"] * 4, key="label", env_info=infos, env_done=ended)
    with pytest.raises(ValueError, match=r"no episode reported info\['sucess'\] \(they reported label, solved\)"):
        info(["p"] * 4, ["a"] * 4, key="sucess", env_info=infos, env_done=ended)
    # no episode ended yet (grpokit's turn cap cut them all): a key reported at the end is not a typo yet
    assert info(["p"], ["a"], key="is_success", env_info=[{"t": 1}], env_done=[False]) == [None]
    with pytest.raises(ValueError, match="'env_info' column"):
        info(["p"], ["a"], key="solved")  # not an environment run
