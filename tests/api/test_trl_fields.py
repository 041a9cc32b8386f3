"""The TRL argument tables cover exactly the installed TRL's GRPOConfig fields, with its defaults."""

import dataclasses

import pytest

from grpokit.api.trl_args import GRPOConfig
from grpokit.api.trl_fields import PLUMBING, REFUSED_UNLESS_DEFAULT


def trl_fields():
    trl = pytest.importorskip("trl")
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory() for f in dataclasses.fields(trl.GRPOConfig)}


def test_every_trl_argument_is_honoured_plumbing_or_refused_and_nothing_else():
    ours = {f.name for f in dataclasses.fields(GRPOConfig)} - {"grpokit"}
    assert ours | set(PLUMBING) | set(REFUSED_UNLESS_DEFAULT) == set(trl_fields())


def test_the_tables_and_the_honoured_fields_carry_trl_defaults():
    trl = trl_fields()
    for table in (PLUMBING, REFUSED_UNLESS_DEFAULT):
        assert {k: trl[k] for k in table} == table
    ours = GRPOConfig()
    assert {f.name: getattr(ours, f.name) for f in dataclasses.fields(GRPOConfig) if f.name not in ("grpokit", "report_to")} == {
        f.name: trl[f.name] for f in dataclasses.fields(GRPOConfig) if f.name not in ("grpokit", "report_to")}
    assert trl["report_to"] == "none" and ours.report_to == []  # as TrainingArguments' __post_init__ turns "none" into []
