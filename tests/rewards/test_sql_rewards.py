"""Tests for the text-to-SQL rewards on a four-row hand-made database."""

import sqlite3

import pytest

from grpokit.rewards import REWARDS
from grpokit.rewards.sql import extract_sql, has_top_level_order_by, results_match, schema_items

SQL_REWARDS = ("sql_execution", "sql_executes", "sql_schema_f1", "sql_format")
GOLD = "SELECT name FROM emp WHERE salary > 100"  # rows: ('Bo',), ('Cy',)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "hr.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE dept (id INTEGER PRIMARY KEY, title TEXT);"
        "CREATE TABLE emp (id INTEGER PRIMARY KEY, name TEXT, dept_id INTEGER, salary INTEGER);"
        "INSERT INTO dept VALUES (1, 'ops'), (2, 'lab');"
        "INSERT INTO emp VALUES (1, 'Al', 1, 100), (2, 'Bo', 1, 200), (3, 'Cy', 2, 300),"
        " (4, 'Di', 2, 100);"
    )
    conn.commit()
    conn.close()
    return str(path)


def _block(sql):
    return f"Let me think.\n```sql\n{sql}\n```"


def _score(name, db, completions, gold=GOLD, **options):
    n = len(completions)
    return REWARDS.get(name)(["q"] * n, completions, answer=[gold] * n, db_path=[db] * n, **options)


def test_sql_execution_hand_cases(db):
    completions = [
        _block(GOLD),  # identical -> 1
        _block("SELECT e.name FROM emp AS e WHERE NOT e.salary <= 100"),  # same rows -> 1
        _block("SELECT name FROM emp WHERE salary > 100 ORDER BY name DESC"),  # order free -> 1
        _block("SELECT name FROM emp"),  # extra rows -> 0
        _block("SELECT name, salary FROM emp WHERE salary > 100"),  # extra column -> 0
        _block("SELEC name FROM emp"),  # syntax error -> 0
        "The names are Bo and Cy.",  # no SQL -> 0
    ]
    assert _score("sql_execution", db, completions) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_sql_execution_respects_gold_order_by_and_multiplicity(db):
    gold = "SELECT name FROM emp ORDER BY salary DESC, name"  # Cy, Bo, Al, Di
    completions = [
        _block("SELECT name FROM emp ORDER BY salary DESC, name ASC"),
        _block("SELECT name FROM emp ORDER BY name"),  # same multiset, wrong order
    ]
    assert _score("sql_execution", db, completions, gold=gold) == [1.0, 0.0]
    # Multisets: the gold has salary 100 twice, DISTINCT has it once.
    dup_gold = "SELECT salary FROM emp"
    completions = [_block("SELECT DISTINCT salary FROM emp"), _block("SELECT salary FROM emp")]
    assert _score("sql_execution", db, completions, gold=dup_gold) == [0.0, 1.0]
    # AVG vs SUM/COUNT: 700/4 = 175.0 either way (floats compared after rounding).
    avg = _block("SELECT SUM(salary) * 1.0 / COUNT(*) FROM emp")
    assert _score("sql_execution", db, [avg], gold="SELECT AVG(salary) FROM emp") == [1.0]


def test_sql_execution_none_where_gold_fails_or_is_missing(db):
    fn = REWARDS.get("sql_execution")
    assert fn(["q"], [_block(GOLD)], answer=["SELECT nope FROM emp"], db_path=[db]) == [None]
    assert fn(["q"], [_block(GOLD)], answer=[None], db_path=[db]) == [None]
    assert fn(["q"], [_block(GOLD)], answer=[GOLD], db_path=[None]) == [None]


def test_sql_execution_honours_max_rows(db):
    # 4 rows with max_rows=3 is the "row cap" error for gold and prediction alike -> None.
    every = "SELECT name FROM emp"
    assert _score("sql_execution", db, [_block(every)], gold=every, max_rows=3) == [None]
    assert _score("sql_execution", db, [_block(every)], gold=every, max_rows=4) == [1.0]


def test_sql_executes(db):
    completions = [_block("SELECT 1"), _block("SELECT missing FROM emp"), "no sql", _block(GOLD)]
    assert _score("sql_executes", db, completions) == [1.0, 0.0, 0.0, 1.0]


def test_sql_schema_f1_hand_values(db):
    # Gold items: {table:emp, column:name, column:salary}.
    completions = [
        _block(GOLD),  # identical -> 1
        _block("SELECT e.name FROM emp AS e WHERE e.salary > 5"),  # alias ignored -> 1
        # {table:emp, column:name, column:dept_id}: |P∩G| = 2 -> 2*2 / (3+3) = 2/3
        _block("SELECT name, dept_id FROM emp"),
        # {table:dept, column:title, column:name}: 'salary' is a literal, not a column;
        # |P∩G| = 1 (name) -> 2*1 / (3+3) = 1/3
        _block("SELECT title FROM dept WHERE title = 'salary' OR title = name"),
        "no sql",  # -> 0
    ]
    scores = _score("sql_schema_f1", db, completions)
    assert scores == pytest.approx([1.0, 1.0, 2 / 3, 1 / 3, 0.0])


def test_schema_items_uses_the_schema_and_unquotes():
    tables, columns = frozenset({"emp"}), frozenset({"name", "salary"})
    items = schema_items('SELECT "Name", [salary] AS pay FROM `EMP` -- emp2', tables, columns)
    assert items == {"table:emp", "column:name", "column:salary"}


def test_sql_format():
    completions = [
        "```sql\nSELECT 1\n```", "```\nSELECT 1\n```", "```sql\nSELECT 1", "SQL: SELECT 1"
    ]
    assert REWARDS.get("sql_format")(["q"] * 4, completions) == [1.0, 0.0, 0.0, 0.0]


def test_sql_format_with_plan_needs_a_numbered_plan_before_the_block():
    # Thinkquel's plan-then-query answers: the block alone (what a policy learned in 6 TS-GRPO steps) scores 0
    completions = ["1. Tables: emp.\n2. Select: name.\n```sql\nSELECT name FROM emp\n```",  # plan, then the query
                   "```sql\nSELECT name FROM emp\n```",  # no plan
                   "```sql\nSELECT 1\n```\n1. Tables: emp.",  # a plan after the query
                   "Plan: read the table.\n```sql\nSELECT 1\n```"]  # text, but no numbered step
    assert REWARDS.get("sql_format")(["q"] * 4, completions, plan=True) == [1.0, 0.0, 0.0, 0.0]
    assert REWARDS.get("sql_format")(["q"] * 4, completions) == [1.0, 1.0, 1.0, 1.0]


def test_extract_sql():
    two_blocks = "```sql\nSELECT 1\n```\nbetter:\n```SQL\nSELECT 2;\n```"
    assert extract_sql(two_blocks) == "SELECT 2;"
    tagged = "Plan: filter.\nSQL: `SELECT name FROM emp`\n\nDone."
    assert extract_sql(tagged) == "SELECT name FROM emp"
    assert extract_sql("SQL: SELECT a\nFROM t\n\nThat is all.") == "SELECT a\nFROM t"
    assert extract_sql("no query here") is None
    assert extract_sql("```sql\n\n```") is None


def test_order_by_detection_is_top_level_only():
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert has_top_level_order_by("select a from t order  by a limit 3")
    assert not has_top_level_order_by("SELECT a, rank() OVER (ORDER BY b) FROM t")
    assert not has_top_level_order_by("SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 2)")
    assert not has_top_level_order_by("SELECT 'ORDER BY' FROM t")


def test_results_match_rounds_floats_and_counts_duplicates():
    assert results_match([(1, 0.1 + 0.2)], [(1, 0.3)], ordered=True)
    assert results_match([(2,), (1,)], [(1,), (2,)], ordered=False)
    assert not results_match([(2,), (1,)], [(1,), (2,)], ordered=True)
    assert not results_match([(1,)], [(1,), (1,)], ordered=False)


@pytest.mark.parametrize("name", SQL_REWARDS)
def test_sql_rewards_ignore_unknown_columns_and_have_summaries(db, name):
    scores = _score(name, db, [_block(GOLD)], schema=["CREATE TABLE …"], unknown_option=1)
    assert scores == [1.0]
    assert REWARDS.summary(name)


@pytest.mark.parametrize("name", ["sql_execution", "sql_executes", "sql_schema_f1"])
def test_missing_db_path_column_or_file_is_a_one_line_error(name, tmp_path):
    with pytest.raises(ValueError, match="needs a 'db_path' column"):
        REWARDS.get(name)(["q"], [_block(GOLD)], answer=[GOLD])
    with pytest.raises(ValueError, match="column 'db_path' names .*, which is not a file"):
        REWARDS.get(name)(["q"], [_block(GOLD)], answer=[GOLD], db_path=[str(tmp_path / "x")])
