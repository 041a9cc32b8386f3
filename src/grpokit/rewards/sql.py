"""Text-to-SQL rewards: sandboxed read-only execution, execution match, schema linking, format.

Rewards for "Sparks of Tabular Reasoning via Text2SQL Reinforcement Learning" (Stoisser et al.,
arXiv 2505.00016) and the reward parts of Thinkquel (Li et al., arXiv 2510.00186):
``r = w_match·sql_execution + w_exec·sql_executes + w_schema·sql_schema_f1 + w_fmt·sql_format``
with the weights set in the config ([inferred] defaults: 1.0 / 0.5 / 0.25 / 0.1; neither paper gives them).

Every query a model writes runs through ``run_sql_readonly``, which layers its defences so that
no single one has to hold: a lexical check (one SELECT/WITH statement), a read-only URI
connection, ``PRAGMA query_only``, an authorizer that allows only reads and an allow-list of
pure functions (no ATTACH, no PRAGMA, no ``load_extension``), length/attach limits, a wall-clock
progress handler, a row cap and a cap on the result's bytes. It runs in the trainer's process: the
model's text reaches only SQLite's parser and virtual machine under these limits, never a shell,
a file write, a second database or a loaded extension.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from grpokit.rewards.builtin import REWARDS, _require

# Pure, bounded-output functions a SELECT may call; everything else (load_extension,
# zeroblob, randomblob, printf, json_*, …) is denied by the authorizer.
SAFE_FUNCTIONS = frozenset(
    """
    count sum avg min max total group_concat abs round lower upper length substr substring
    trim ltrim rtrim replace coalesce ifnull nullif iif instr like glob typeof hex char unicode
    date time datetime julianday strftime sign floor ceil ceiling sqrt pow power mod
    row_number rank dense_rank ntile lag lead first_value last_value nth_value percent_rank
    cume_dist
    """.split()
)
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
# SQLite checks the progress handler every this many virtual-machine instructions.
_PROGRESS_EVERY = 1000
_MAX_TEXT_BYTES = 1_000_000
_MAX_SQL_CHARS = 100_000
_MAX_RESULT_BYTES = 1 << 20

_SQL_BLOCK = re.compile(r"```sql(?:ite)?(?!\w)[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_SQL_TAG = re.compile(r"\bSQL\s*:", re.IGNORECASE)
_TOKEN = re.compile(
    r"""(?P<comment>--[^\n]*|/\*.*?\*/)
      | (?P<string>'(?:[^']|'')*')
      | (?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])
      | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      | (?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)
      | (?P<space>\s+)
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)


def _tokens(sql: str) -> list[tuple[str, str]] | None:
    """Lex ``sql`` into (kind, text) pairs; None if a quote or block comment is unterminated."""
    out: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(sql):
        kind, text = match.lastgroup or "other", match.group()
        # An opener left as "other" is one the string/identifier/comment patterns could not close.
        if kind == "other" and (text in "'\"`[" or sql.startswith("/*", match.start())):
            return None
        out.append((kind, text))
    return out


def check_single_select(sql: str) -> tuple[str | None, str | None]:
    """Return ``(statement, None)`` for one SELECT/WITH statement, else ``(None, reason)``.

    Comments are removed, trailing ``;`` are dropped, any other ``;`` (stacked statements such
    as ``SELECT 1; DROP TABLE t``) is refused, and ``sqlite3.complete_statement`` must accept
    the result (no unterminated quotes).
    """
    tokens = _tokens(sql)
    if tokens is None:
        return None, "unterminated quote or comment"
    tokens = [("space", " ") if k == "comment" else (k, t) for k, t in tokens]
    while tokens and (tokens[-1][0] == "space" or tokens[-1] == ("other", ";")):
        tokens.pop()
    words = [(k, t) for k, t in tokens if k != "space"]
    if not words:
        return None, "empty query"
    if ("other", ";") in words:
        return None, "more than one statement"
    if words[0][0] != "word" or words[0][1].upper() not in ("SELECT", "WITH"):
        return None, "only SELECT or WITH queries are allowed"
    statement = "".join(t for _, t in tokens).strip()
    if len(statement) > _MAX_SQL_CHARS or not sqlite3.complete_statement(statement + ";"):
        return None, "incomplete or oversized statement"
    return statement, None


def _authorizer(action: int, arg1: str | None, arg2: str | None, *_: str | None) -> int:
    """SQLite authorizer: reads and allow-listed functions only; deny writes, PRAGMA, ATTACH."""
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in SAFE_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def run_sql_readonly(
    db_path: str | Path, sql: str, *, timeout_s: float = 1.0, max_rows: int = 1000,
    max_result_bytes: int = _MAX_RESULT_BYTES,
) -> tuple[list[tuple] | None, str | None]:
    """Execute one SELECT on a SQLite file read-only; return ``(rows, None)`` or ``(None, error)``.

    Never raises for a bad query and never modifies the file: the connection is opened with
    ``mode=ro``, ``PRAGMA query_only=1`` is set, the authorizer denies every action except
    SELECT/READ/recursive-CTE and allow-listed functions (``SAFE_FUNCTIONS``), ATTACH is limited
    to 0 databases, extension loading is off, and the progress handler aborts after
    ``timeout_s`` of wall time. More than ``max_rows`` rows is the error "row cap"; rows whose
    values add up to more than ``max_result_bytes`` (text and blobs by length, numbers 8 bytes)
    the error "result cap": without it 1000 rows of SQLite's 1 MB longest value would put 1 GB
    in the trainer's memory (a doubling recursive CTE builds such rows in about a second).
    """
    statement, reason = check_single_select(sql)
    if statement is None:
        return None, f"refused: {reason}"
    path = Path(db_path)
    if not path.is_file():
        return None, f"no database file at {path}"
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    deadline = time.monotonic() + timeout_s
    timed_out = False

    def progress() -> int:
        nonlocal timed_out
        timed_out = time.monotonic() > deadline
        return int(timed_out)

    conn = None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None)
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_TEXT_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, _MAX_SQL_CHARS)
        conn.execute("PRAGMA query_only = 1")
        conn.set_authorizer(_authorizer)
        conn.set_progress_handler(progress, _PROGRESS_EVERY)
        rows, size = [], 0
        for row in conn.execute(statement):  # row by row: the progress handler's deadline covers each step
            rows.append(row)
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            if size > max_result_bytes:
                return None, f"result cap: more than {max_result_bytes} bytes"
            if len(rows) > max_rows:
                break
    except (sqlite3.Error, MemoryError, OverflowError, ValueError) as exc:
        return None, "timeout" if timed_out else f"{type(exc).__name__}: {exc}"
    finally:
        if conn is not None:
            conn.close()
    if len(rows) > max_rows:
        return None, f"row cap: more than {max_rows} rows"
    return [tuple(r) for r in rows], None


def extract_sql(completion: str) -> str | None:
    """The SQL of a completion: the last ```sql block, else the text after the last "SQL:".

    After "SQL:" the query runs to the first blank line; surrounding backticks are dropped.
    """
    blocks = _SQL_BLOCK.findall(completion)
    if blocks:
        return blocks[-1].strip() or None
    tags = list(_SQL_TAG.finditer(completion))
    if not tags:
        return None
    text = completion[tags[-1].end() :].strip()
    text = re.split(r"\n\s*\n", text, maxsplit=1)[0]
    return text.strip().strip("`").strip() or None


def _normalise(row: tuple) -> tuple:
    """Round floats to 6 decimals so AVG/SUM orderings that differ in the last ulp compare equal."""
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


def has_top_level_order_by(sql: str) -> bool:
    """True if ``sql`` has ORDER BY outside parentheses (not in a subquery or window)."""
    depth, previous = 0, ""
    for kind, text in _tokens(sql) or []:
        if kind == "other" and text == "(":
            depth += 1
        elif kind == "other" and text == ")":
            depth -= 1
        elif kind == "word":
            if depth == 0 and previous == "ORDER" and text.upper() == "BY":
                return True
            previous = text.upper()
    return False


def results_match(predicted: list[tuple], gold: list[tuple], ordered: bool) -> bool:
    """Execution match: equal row lists if ``ordered``, else equal row multisets.

    Floats are rounded to 6 decimals first.
    """
    pred_rows = [_normalise(r) for r in predicted]
    gold_rows = [_normalise(r) for r in gold]
    if ordered:
        return pred_rows == gold_rows
    return Counter(pred_rows) == Counter(gold_rows)


@functools.lru_cache(maxsize=256)
def _schema_names(db_path: str, mtime_ns: int) -> tuple[frozenset[str], frozenset[str]]:
    """Lower-cased (table names, column names) of a SQLite file; ``mtime_ns`` keys the cache."""
    conn = sqlite3.connect(f"file:{urllib.parse.quote(db_path)}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        info = "SELECT name FROM pragma_table_info(?)"
        columns = {r[0] for t in tables for r in conn.execute(info, (t,))}
    finally:
        conn.close()
    return frozenset(t.lower() for t in tables), frozenset(c.lower() for c in columns)


def schema_items(sql: str, tables: frozenset[str], columns: frozenset[str]) -> set[str]:
    """Schema elements a query names: ``{"table:<t>", "column:<c>"}`` (aliases are ignored).

    Identifiers are lower-cased and unquoted; a word that names a table counts as a table, one
    that names a column as a column (both if both); string literals and comments never count.
    """
    items: set[str] = set()
    for kind, text in _tokens(sql) or []:
        if kind == "quoted":
            name = text[1:-1].lower()
        elif kind == "word":
            name = text.lower()
        else:
            continue
        if name in tables:
            items.add(f"table:{name}")
        if name in columns:
            items.add(f"column:{name}")
    return items


def _f1(predicted: set[str], gold: set[str]) -> float:
    """Set F1 = 2|P∩G| / (|P| + |G|); 1.0 when both are empty."""
    if not predicted and not gold:
        return 1.0
    return 2 * len(predicted & gold) / (len(predicted) + len(gold))


def _columns(reward: str, n: int, answer: Sequence | None, db_path: Sequence | None) -> tuple:
    """The ``answer`` and ``db_path`` columns; raises if missing or if a database file is absent."""
    answers, paths = _require(reward, "answer", answer, n), _require(reward, "db_path", db_path, n)
    for path in {str(p) for p in paths if p is not None}:
        if not Path(path).is_file():
            raise ValueError(
                f"reward '{reward}': column 'db_path' names {path}, which is not a file; "
                "fix the path or regenerate the databases"
            )
    return answers, paths


@REWARDS.register("sql_execution")
def sql_execution(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    db_path: Sequence | None = None,
    timeout_s: float = 1.0,
    max_rows: int = 1000,
    **kwargs: Any,
) -> list[float | None]:
    """Execution accuracy EX: 1.0 if the predicted SQL returns the gold SQL's rows, else 0.0.

    Rows are compared as multisets, or as lists when the gold query has a top-level ORDER BY
    (Sparks, arXiv 2505.00016, EX). No extractable SQL, a refused query, an error, a timeout or
    the row cap give 0.0; None where the gold query itself fails or a column is None.
    """
    answers, paths = _columns("sql_execution", len(completions), answer, db_path)
    limits = {"timeout_s": timeout_s, "max_rows": max_rows}
    gold_cache: dict[tuple[str, str], list[tuple] | None] = {}
    scores: list[float | None] = []
    for completion, gold, path in zip(completions, answers, paths):
        if gold is None or path is None:
            scores.append(None)
            continue
        key = (str(path), str(gold))
        if key not in gold_cache:
            gold_cache[key] = run_sql_readonly(path, str(gold), **limits)[0]
        gold_rows = gold_cache[key]
        if gold_rows is None:
            scores.append(None)
            continue
        sql = extract_sql(completion)
        rows = None if sql is None else run_sql_readonly(path, sql, **limits)[0]
        ordered = has_top_level_order_by(str(gold))
        scores.append(float(rows is not None and results_match(rows, gold_rows, ordered)))
    return scores


@REWARDS.register("sql_executes")
def sql_executes(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    db_path: Sequence | None = None,
    timeout_s: float = 1.0,
    max_rows: int = 1000,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 if the completion's SQL runs read-only without error, timeout or row cap, else 0.0.

    The Thinkquel "execution success" term (arXiv 2510.00186). ``answer`` is not used but is
    required like in the other SQL rewards so that one data set serves all of them.
    """
    _, paths = _columns("sql_executes", len(completions), answer, db_path)
    scores: list[float | None] = []
    for completion, path in zip(completions, paths):
        if path is None:
            scores.append(None)
            continue
        sql = extract_sql(completion)
        if sql is None:
            scores.append(0.0)
            continue
        _, error = run_sql_readonly(path, sql, timeout_s=timeout_s, max_rows=max_rows)
        scores.append(float(error is None))
    return scores


@REWARDS.register("sql_schema_f1")
def sql_schema_f1(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    db_path: Sequence | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Schema-linking F1 between the tables/columns the predicted and the gold SQL name.

    ``F1 = 2|P∩G| / (|P|+|G|)`` over items ``table:<t>`` / ``column:<c>`` found by matching
    identifiers against the database's own schema (``schema_items``), so aliases and literals
    do not count (Thinkquel ``schema_link_score``, arXiv 2510.00186). The query is not run.
    0.0 without extractable SQL; None where a column is None.
    """
    answers, paths = _columns("sql_schema_f1", len(completions), answer, db_path)
    scores: list[float | None] = []
    for completion, gold, path in zip(completions, answers, paths):
        if gold is None or path is None:
            scores.append(None)
            continue
        sql = extract_sql(completion)
        if sql is None:
            scores.append(0.0)
            continue
        resolved = Path(path).resolve()
        tables, cols = _schema_names(str(resolved), resolved.stat().st_mtime_ns)
        scores.append(_f1(schema_items(sql, tables, cols), schema_items(str(gold), tables, cols)))
    return scores


_PLAN_STEP = re.compile(r"^\s*1\.\s+\S", re.M)  # a numbered plan's first step


@REWARDS.register("sql_format")
def sql_format(prompts: list[str], completions: list[str], plan: bool = False, **kwargs: Any) -> list[float | None]:
    """1.0 if the completion contains a closed ```sql code block, else 0.0.

    The format term of the Text2SQL reward (Stoisser et al., arXiv 2505.00016); its form is [inferred].
    ``plan``: the plan-then-query format of Thinkquel's answers (Li et al., arXiv 2510.00186, §3): the
    block must follow a numbered plan (a line ``1. ...`` before the opening fence). Without it a
    policy rewarded for the block alone drops the plan (measured: docs/pipelines.md) [inferred].
    """
    out = []
    for c in completions:
        block = _SQL_BLOCK.search(c)
        out.append(float(block is not None and (not plan or _PLAN_STEP.search(c[: block.start()]) is not None)))
    return out
