"""Tests for the text_to_sql task: cached databases, determinism, disjoint splits, gold SQL."""

import hashlib
import re
import sqlite3
from pathlib import Path

import pytest

from grpokit.data.sql_task import DB_VERSION, SCHEMA, _db_rows, ensure_database
from grpokit.data.tasks import TASKS, TaskSplits
from grpokit.rewards import REWARDS
from grpokit.rewards.sql import run_sql_readonly


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))
    return tmp_path


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_text_to_sql_rows_databases_and_determinism(cache):
    splits = TASKS.get("text_to_sql")(seed=5, n_train=40, n_heldout=10, n_databases=2)
    again = TASKS.get("text_to_sql")(seed=5, n_train=40, n_heldout=10, n_databases=2)
    other = TASKS.get("text_to_sql")(seed=6, n_train=40, n_heldout=10, n_databases=2)
    assert isinstance(splits, TaskSplits) and splits == again
    assert [r["prompt"] for r in splits.train] != [r["prompt"] for r in other.train]
    train = {r["prompt"] for r in splits.train}
    heldout = {r["prompt"] for r in splits.heldout}
    assert len(train) == 40 and len(heldout) == 10 and not train & heldout
    paths = {r["db_path"] for r in splits.train + splits.heldout}
    assert paths == {str(cache / "sql" / "5" / f"db_{k}.sqlite") for k in (0, 1)}
    for row in splits.train + splits.heldout:
        assert row["task"] == "text_to_sql" and row["schema"] == SCHEMA
        assert row["question"] in row["prompt"] and SCHEMA in row["prompt"]
        assert "```sql" in row["prompt"]
        assert row["answer"].startswith("SELECT")


def test_every_gold_query_runs_and_scores_one(cache):
    splits = TASKS.get("text_to_sql")(seed=1, n_train=120, n_heldout=20)
    rows = splits.train + splits.heldout
    assert {r["domain"] for r in rows} >= {"count_department", "top_paid", "title_counts"}
    for row in rows:
        result, error = run_sql_readonly(row["db_path"], row["answer"])
        assert error is None and result, row["answer"]
    completions = [f"```sql\n{r['answer']}\n```" for r in rows]
    scores = REWARDS.get("sql_execution")(
        [r["prompt"] for r in rows], completions,
        answer=[r["answer"] for r in rows], db_path=[r["db_path"] for r in rows],
    )
    assert scores == [1.0] * len(rows)


def test_count_question_matches_a_count_over_the_generated_rows(cache):
    rows = TASKS.get("text_to_sql")(seed=2, n_train=150, n_heldout=0, n_databases=1).train
    counted = [r for r in rows if r["domain"] == "count_department"]
    assert counted
    db = _db_rows(2, 0)
    for row in counted:
        dep_name = re.search(r"work in the (\w+) department", row["question"]).group(1)
        dep_id = next(d[0] for d in db["departments"] if d[1] == dep_name)
        expected = sum(1 for e in db["employees"] if e[2] == dep_id)
        assert run_sql_readonly(row["db_path"], row["answer"]) == ([(expected,)], None)


def test_heldout_does_not_depend_on_n_train():
    small = TASKS.get("text_to_sql")(seed=3, n_train=5, n_heldout=8)
    large = TASKS.get("text_to_sql")(seed=3, n_train=60, n_heldout=8)
    assert small.heldout == large.heldout


def test_databases_are_written_once_and_rebuilt_when_outdated(cache):
    path = ensure_database(seed=9, k=0)
    assert path == cache / "sql" / "9" / "db_0.sqlite"
    digest, mtime = _sha(path), path.stat().st_mtime_ns
    assert ensure_database(seed=9, k=0).stat().st_mtime_ns == mtime  # not rewritten
    conn = sqlite3.connect(path)
    counts = [conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in _db_rows(9, 0)]
    conn.execute("PRAGMA user_version = 0")  # a file from an older generator
    conn.commit()
    conn.close()
    assert counts == [len(v) for v in _db_rows(9, 0).values()]
    assert _sha(ensure_database(seed=9, k=0)) == digest  # rebuilt, byte-identical
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == DB_VERSION
    conn.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["db_0.sqlite"]  # no temp files left


def test_generated_data_keeps_order_by_answers_tie_free():
    db = _db_rows(0, 0)
    salaries = [e[4] for e in db["employees"]]
    amounts = [o[3] for o in db["orders"]]
    assert len(set(salaries)) == len(salaries) and len(set(amounts)) == len(amounts)
    assert len({e[1] for e in db["employees"]}) == len(db["employees"])  # names identify people


def test_bad_options_and_unwritable_cache_are_one_line_errors(cache, monkeypatch):
    with pytest.raises(ValueError, match="option 'n_databases' must be an int >= 1"):
        TASKS.get("text_to_sql")(seed=0, n_train=1, n_heldout=1, n_databases=0)
    blocker = cache / "not_a_folder"
    blocker.write_text("x")
    monkeypatch.setenv("GRPOKIT_CACHE", str(blocker))
    with pytest.raises(ValueError, match="set GRPOKIT_CACHE to a writable folder"):
        TASKS.get("text_to_sql")(seed=0, n_train=1, n_heldout=1)
