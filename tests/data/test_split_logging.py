"""Rows dropped as duplicates or held out of training are counted in one INFO line at load."""

import json
import logging

from grpokit.config.schema import DataConfig
from grpokit.data.files import file_splits, split_rows
from grpokit.data.offline import split_by_prompt


def _write(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p, "answer": "1"}) + "\n" for p in prompts))
    return str(path)


def _messages(caplog, logger):
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_duplicates_and_held_out_rows_are_counted_in_one_line(tmp_path, caplog):
    # 33 distinct prompts + 7 repeats of q0..q6 = 40 rows; round(0.1 * 33) = round(3.3) = 3 held out, 33 - 3 = 30 train
    path = _write(tmp_path / "d.jsonl", [f"q{i}" for i in range(33)] + [f"q{i}" for i in range(7)])
    with caplog.at_level(logging.INFO, logger="grpokit.data.files"):
        splits = file_splits(DataConfig(task=None, path=path, heldout_fraction=0.1, seed=0))
    assert (len(splits.train), len(splits.heldout)) == (30, 3)
    assert _messages(caplog, "grpokit.data.files") == [
        f"data: 40 rows from {path}; 7 duplicate prompts dropped (first kept); 3 of the 33 distinct held out "
        "for evaluation (data.heldout_fraction=0.1), 30 for training"
    ]


def test_the_default_fraction_is_named_even_without_duplicates(caplog):
    # 10 distinct rows, the schema default 0.1: round(1.0) = 1 held out, 9 train, 0 dropped
    rows = [{"prompt": f"q{i}", "answer": "1"} for i in range(10)]
    with caplog.at_level(logging.INFO, logger="grpokit.data.files"):
        split_rows(rows, DataConfig().heldout_fraction, seed=0)
    assert _messages(caplog, "grpokit.data.files") == [
        "data: 10 rows; 0 duplicate prompts dropped (first kept); 1 of the 10 distinct held out "
        "for evaluation (data.heldout_fraction=0.1), 9 for training"
    ]


def test_a_heldout_file_sharing_prompts_with_the_training_file_warns(tmp_path, caplog):
    train = _write(tmp_path / "train.jsonl", ["a", "b", "c"])
    held = _write(tmp_path / "held.jsonl", ["b", "d"])  # "b" is in both files: 1 of 2 held-out rows
    with caplog.at_level(logging.INFO, logger="grpokit.data.files"):
        splits = file_splits(DataConfig(task=None, path=train, heldout_path=held))
    assert (len(splits.train), len(splits.heldout)) == (3, 2)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert infos == [f"data: 3 training rows from {train}; 2 held out for evaluation from {held} "
                     "(data.heldout_path; data.heldout_fraction unused)"]
    assert len(warnings) == 1 and warnings[0].startswith(f"data: 1 of the 2 held-out rows in {held} have a prompt")


def test_offline_prompt_split_counts_prompts_and_rows(caplog):
    # 5 prompts, p0 with 3 rows (a KTO prompt with several completions), the others with 1: 7 rows.
    # round(0.2 * 5) = 1 prompt held out; which one is seeded, so the rows on each side are read back.
    rows = [{"prompt": "p0"}, {"prompt": "p0"}, {"prompt": "p0"}] + [{"prompt": f"p{i}"} for i in range(1, 5)]
    with caplog.at_level(logging.INFO, logger="grpokit.data.offline"):
        splits = split_by_prompt(rows, 0.2, seed=0, source="x.jsonl")
    held = len(splits.heldout)
    assert _messages(caplog, "grpokit.data.offline") == [
        f"data: 7 rows of 5 prompts from x.jsonl; 1 prompts ({held} rows) held out for evaluation "
        f"(data.heldout_fraction=0.2), 4 prompts ({7 - held} rows) for training"
    ]
