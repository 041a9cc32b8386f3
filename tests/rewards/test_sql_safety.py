"""Hostile model-written SQL: every query scores 0, ends within the time limit, changes no byte.

The acceptance suite for ``grpokit.rewards.sql.run_sql_readonly``: writes, DDL, ATTACH,
PRAGMA, extension loading, runaway recursion, a > 10^7-row cross join and stacked statements.
"""

import hashlib
import sqlite3
import time

import pytest

from grpokit.rewards import REWARDS
from grpokit.rewards.sql import check_single_select, run_sql_readonly

TIMEOUT_S = 0.3
N_ROWS = 250  # 250^4 ≈ 3.9e9 rows in the four-way cross join: far beyond 10^7

HOSTILE = {
    "drop": "DROP TABLE t",
    "insert": "INSERT INTO t VALUES (1)",
    "update": "UPDATE t SET x = 0",
    "delete": "DELETE FROM t",
    "attach": "ATTACH DATABASE '{evil}' AS evil",
    "pragma_writable_schema": "PRAGMA writable_schema=1",
    "pragma_journal_mode": "PRAGMA journal_mode=WAL",
    "pragma_function": "SELECT * FROM pragma_table_info('t')",
    "load_extension": "SELECT load_extension('x')",
    "recursive_cte_rows": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT * FROM c"
    ),
    "recursive_cte_count": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
    ),
    "cross_join": "SELECT count(*) FROM t a, t b, t c, t d",
    "stacked_drop": "SELECT x FROM t; DROP TABLE t",
    "stacked_drop_comment": "SELECT x FROM t; DROP TABLE t; --",
    "with_delete": "WITH a AS (SELECT 1) DELETE FROM t",
    "with_insert": "WITH a AS (SELECT 2) INSERT INTO t SELECT * FROM a",
    "zeroblob": "SELECT zeroblob(1000000000)",
    "printf_blowup": "SELECT printf('%.*c', 1000000000, 'x')",
    "string_doubling": (
        "WITH RECURSIVE c(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM c) "
        "SELECT length(s) FROM c"
    ),
    "begin": "BEGIN IMMEDIATE",
    "vacuum_into": "VACUUM INTO '{evil}'",
    "result_blowup": (  # 1000 rows of a 2^19-character string: 512 MB in the trainer without the result cap
        "WITH RECURSIVE c(s, n) AS (SELECT 'x', 0 UNION ALL SELECT s || s, n + 1 FROM c WHERE n < 19), "
        "d(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM d WHERE k < 1000) SELECT s FROM c, d WHERE n = 19"
    ),
    "attach_uri_rwc": "ATTACH DATABASE 'file:{evil}?mode=rwc' AS evil",
    "pragma_query_only_off": "PRAGMA query_only = 0",
    "temp_table": "CREATE TEMP TABLE tt AS SELECT * FROM t",
}


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(N_ROWS)])
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_query_scores_zero_fast_and_leaves_file_identical(db, name):
    evil = db.parent / "evil.sqlite"
    completion = f"Here you go:\n```sql\n{HOSTILE[name].format(evil=evil)}\n```"
    columns = {"answer": ["SELECT count(*) FROM t"], "db_path": [str(db)]}
    columns["timeout_s"] = TIMEOUT_S
    before = _sha256(db)
    for reward in ("sql_execution", "sql_executes"):
        start = time.monotonic()
        score = REWARDS.get(reward)(["q"], [completion], **columns)
        assert score == [0.0]
        assert time.monotonic() - start < TIMEOUT_S + 1.0
    assert _sha256(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["t.sqlite"]  # no journal, no evil db


def test_run_sql_readonly_reports_every_refusal_as_an_error(db):
    # The two runaway queries are timed in test_runaway_queries_end_by_timeout_or_row_cap.
    for name in sorted(set(HOSTILE) - {"cross_join", "recursive_cte_count"}):
        rows, error = run_sql_readonly(db, HOSTILE[name].format(evil="x.db"), timeout_s=TIMEOUT_S)
        assert rows is None and isinstance(error, str) and error, name


def test_runaway_queries_end_by_timeout_or_row_cap(db):
    rows, error = run_sql_readonly(db, HOSTILE["cross_join"], timeout_s=TIMEOUT_S)
    assert error == "timeout"
    # A generous timeout: the row cap must stop this one, even on a loaded machine.
    rows, error = run_sql_readonly(db, HOSTILE["recursive_cte_rows"], timeout_s=30.0)
    assert error == "row cap: more than 1000 rows"
    rows, error = run_sql_readonly(db, "SELECT x FROM t", max_rows=N_ROWS - 1)
    assert error == f"row cap: more than {N_ROWS - 1} rows"
    rows, error = run_sql_readonly(db, "SELECT x FROM t", max_rows=N_ROWS)
    assert error is None and len(rows) == N_ROWS


def test_the_result_cap_counts_the_bytes_of_the_rows(db):
    # Each row holds one 2^19 = 524288-character string: two rows are 1048576 bytes (not more
    # than the cap of 1048576), the third makes 1572864 and is refused.
    rows, error = run_sql_readonly(db, HOSTILE["result_blowup"], timeout_s=30.0)
    assert rows is None and error == "result cap: more than 1048576 bytes"
    two = HOSTILE["result_blowup"].replace("k < 1000", "k < 2")
    rows, error = run_sql_readonly(db, two, timeout_s=30.0)
    assert error is None and [len(r[0]) for r in rows] == [524288, 524288]
    # Numbers count 8 bytes: 250 rows of x are 2000 bytes.
    assert run_sql_readonly(db, "SELECT x FROM t", max_result_bytes=1999)[1] == "result cap: more than 1999 bytes"
    assert run_sql_readonly(db, "SELECT x FROM t", max_result_bytes=2000)[1] is None


def test_authorizer_blocks_writes_the_lexical_check_lets_through(db):
    # "WITH … DELETE" starts with WITH, so only the authorizer (and mode=ro) stop it.
    statement, reason = check_single_select(HOSTILE["with_delete"])
    assert statement == HOSTILE["with_delete"] and reason is None
    rows, error = run_sql_readonly(db, HOSTILE["with_delete"])
    assert rows is None and "not authorized" in error


def test_lexical_check():
    assert check_single_select("SELECT 1;") == ("SELECT 1", None)
    assert check_single_select("  -- note\nSELECT 'a;b' /* ; */ ;;") == ("SELECT 'a;b'", None)
    assert check_single_select("SELECT 1 >= 0") == ("SELECT 1 >= 0", None)
    assert check_single_select("SELECT 1; SELECT 2")[1] == "more than one statement"
    assert check_single_select("select 'open")[1] == "unterminated quote or comment"
    assert check_single_select("SELECT 1 /* open")[1] == "unterminated quote or comment"
    assert check_single_select("VALUES (1)")[1] == "only SELECT or WITH queries are allowed"
    assert check_single_select(" ; -- only a comment")[1] == "empty query"


def test_safe_queries_still_run(db):
    # Comments with ";" are harmless; aggregates, windows and CTEs are on the allow-list.
    assert run_sql_readonly(db, "SELECT count(*) FROM t -- ; DROP TABLE t") == ([(N_ROWS,)], None)
    assert run_sql_readonly(db, "SELECT x FROM t WHERE x < 3 ORDER BY x DESC;") == (
        [(2,), (1,), (0,)],
        None,
    )
    rows, error = run_sql_readonly(
        db, "SELECT x, row_number() OVER (ORDER BY x DESC) FROM t ORDER BY x LIMIT 2"
    )
    assert error is None and rows == [(0, N_ROWS), (1, N_ROWS - 1)]
    rows, error = run_sql_readonly(
        db, "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5) "
        "SELECT sum(n), avg(n), upper('a') FROM c"
    )
    assert error is None and rows == [(15, 3.0, "A")]  # 1+2+3+4+5 = 15, mean 3


def test_odd_paths_and_missing_files(tmp_path):
    folder = tmp_path / "a dir ?#%"
    folder.mkdir()
    path = folder / "d b.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    assert run_sql_readonly(path, "SELECT count(*) FROM t") == ([(0,)], None)
    rows, error = run_sql_readonly(tmp_path / "missing.sqlite", "SELECT 1")
    assert rows is None and error.startswith("no database file")
    assert not (tmp_path / "missing.sqlite").exists()
