"""Tests for grpokit.data.files: each format round-trips; errors name the file or field."""

import csv
import json

import pytest

from grpokit.data.files import DataError, load_rows, split_rows
from grpokit.data.tasks import TaskSplits

ROWS = [
    {"question": "What is 1 + 1?", "solution": 2, "level": "easy"},
    {"question": "What is 3 * 4?", "solution": 12, "level": "hard"},
]
EXPECTED = [
    {"prompt": "What is 1 + 1?", "answer": "2", "level": "easy"},
    {"prompt": "What is 3 * 4?", "answer": "12", "level": "hard"},
]


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")


def _write_json(path, rows):
    path.write_text(json.dumps(rows))


def _write_csv(path, rows):
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


WRITERS = {
    "data.jsonl": _write_jsonl,
    "data.json": _write_json,
    "data.csv": _write_csv,
    "data.parquet": _write_parquet,
}


@pytest.mark.parametrize("filename", list(WRITERS))
def test_round_trip(tmp_path, filename):
    path = tmp_path / filename
    WRITERS[filename](path, ROWS)
    rows = load_rows(str(path), prompt_column="question", answer_column="solution")
    assert rows == EXPECTED


def test_default_columns_and_extra_columns_kept(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, [{"prompt": "p", "answer": 3.5, "numbers": [1, 2]}])
    assert load_rows(str(path)) == [{"prompt": "p", "answer": "3.5", "numbers": [1, 2]}]


def test_no_answer_column(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, [{"prompt": "p"}])
    assert load_rows(str(path), answer_column=None) == [{"prompt": "p"}]


def test_save_to_disk_dataset_and_dataset_dict(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "single"))
    rows = load_rows(str(tmp_path / "single"), "question", "solution")
    assert rows == EXPECTED

    dd = datasets.DatasetDict({"train": ds, "test": ds.select([1])})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert load_rows(str(tmp_path / "dict"), "question", "solution") == EXPECTED
    assert load_rows(str(tmp_path / "dict"), "question", "solution", split="test") == EXPECTED[1:]
    with pytest.raises(DataError, match="validation.*available: train, test.*data.split"):
        load_rows(str(tmp_path / "dict"), "question", "solution", split="validation")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found.*nope.jsonl"):
        load_rows(str(tmp_path / "nope.jsonl"))


def test_unsupported_extension(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("hello")
    with pytest.raises(DataError, match=r"'\.txt'.*\.jsonl, \.json, \.csv, \.parquet"):
        load_rows(str(path))


def test_missing_prompt_column_names_column_and_field(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, ROWS)
    with pytest.raises(DataError) as info:
        load_rows(str(path))
    message = str(info.value)
    assert "'prompt'" in message and "question, solution, level" in message
    assert "data.prompt_column" in message
    assert "\n" not in message


def test_missing_answer_column_names_column_and_field(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, ROWS)
    with pytest.raises(DataError, match="'answer'.*data.answer_column"):
        load_rows(str(path), prompt_column="question")


def test_empty_prompt_names_row(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, [{"prompt": "ok", "answer": 1}, {"prompt": "  ", "answer": 2}])
    with pytest.raises(DataError, match="empty prompt in row 1"):
        load_rows(str(path))


def test_bad_json(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a", "answer": 1}\n{oops\n')
    with pytest.raises(DataError, match="line 2"):
        load_rows(str(path))
    path = tmp_path / "d.json"
    path.write_text('{"prompt": "a"}')
    with pytest.raises(DataError, match="list of objects"):
        load_rows(str(path))


def test_empty_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("")
    with pytest.raises(DataError, match="no rows"):
        load_rows(str(path))


def test_split_rows_seeded_and_disjoint():
    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(10)]
    rows.append({"prompt": "q3", "answer": "dup"})  # duplicate prompt is dropped
    a = split_rows(rows, heldout_fraction=0.2, seed=0)
    b = split_rows(rows, heldout_fraction=0.2, seed=0)
    assert isinstance(a, TaskSplits) and a == b
    assert len(a.heldout) == 2 and len(a.train) == 8  # round(0.2 * 10) = 2
    prompts = [r["prompt"] for r in a.train + a.heldout]
    assert sorted(prompts) == sorted(f"q{i}" for i in range(10))
    assert split_rows(rows, 0.2, seed=1) != a


def test_split_rows_edges():
    rows = [{"prompt": f"q{i}", "answer": "0"} for i in range(3)]
    assert len(split_rows(rows, 0.0, seed=0).heldout) == 0
    assert len(split_rows(rows, 0.01, seed=0).heldout) == 1  # at least one when fraction > 0
    with pytest.raises(DataError, match="heldout_fraction"):
        split_rows(rows, 1.0, seed=0)
    with pytest.raises(DataError, match="heldout_fraction"):
        split_rows(rows[:1], 0.5, seed=0)
