"""Text-to-SQL task: questions over small generated SQLite databases, answered by gold SQL.

Task ``text_to_sql`` for the Text2SQL GRPO recipes (Stoisser et al., "Sparks of Tabular
Reasoning via Text2SQL Reinforcement Learning", arXiv 2505.00016; Thinkquel, arXiv 2510.00186).
Each seed owns ``n_databases`` SQLite files with the same three tables (departments, employees,
orders) and seeded rows, written once under ``<cache>/sql/<seed>/db_<k>.sqlite`` (``<cache>`` is
``$GRPOKIT_CACHE`` or ``~/.cache/grpokit``). Questions come from templates covering WHERE,
COUNT, GROUP BY, JOIN and ORDER BY/LIMIT; their parameters are drawn from the rows of the
database they are asked about, so the gold query returns a non-trivial result.

Option ``templates`` picks the question pool: ``basic`` (the default: the fourteen templates
above, one- and two-table queries), ``compositional`` (ten templates that compose the clauses:
three-table JOINs, GROUP BY with HAVING, GROUP BY with ORDER BY over an aggregate and LIMIT,
COUNT(DISTINCT), filters before grouping) or ``all`` (both pools). The compositional pool is
what the clause-level chain-of-thought stage (:mod:`grpokit.data.sql_cot`) has something to
teach on [inferred: the paper trains on BIRD, whose queries compose these clauses].

Rows: ``prompt`` (instruction + schema + question), ``answer`` (gold SQL), ``db_path``,
``schema`` (CREATE TABLE text), ``question``, ``domain`` (template name), ``task``.
The prompt does not name the database: the same question on two databases is the same prompt,
so train/held-out disjointness holds at the question level.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
import urllib.parse
from pathlib import Path

from grpokit.data.sql_templates import COMPOSITIONAL_KINDS, compositional_question
from grpokit.data.tasks import TASKS, TaskSplits, _sample_splits
from grpokit.model.loading import cache_dir

# Bump when the generated contents change so stale cached files are rebuilt.
DB_VERSION = 1

SCHEMA = (
    "CREATE TABLE departments (\n"
    "  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n  city TEXT NOT NULL,\n"
    "  budget INTEGER NOT NULL\n);\n"
    "CREATE TABLE employees (\n"
    "  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n"
    "  department_id INTEGER NOT NULL REFERENCES departments(id),\n"
    "  title TEXT NOT NULL,\n  salary INTEGER NOT NULL,\n  hire_year INTEGER NOT NULL\n);\n"
    "CREATE TABLE orders (\n"
    "  id INTEGER PRIMARY KEY,\n  employee_id INTEGER NOT NULL REFERENCES employees(id),\n"
    "  customer TEXT NOT NULL,\n  amount INTEGER NOT NULL,\n  order_year INTEGER NOT NULL,\n"
    "  status TEXT NOT NULL\n);"
)
DEPARTMENTS = (
    "Sales", "Engineering", "Marketing", "Finance", "Support", "Legal", "Research", "Operations",
)
CITIES = ("Berlin", "Lisbon", "Osaka", "Toronto", "Nairobi", "Lima")
FIRST_NAMES = (
    "Ada", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena",
)
LAST_NAMES = (
    "Abe", "Brandt", "Costa", "Diallo", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jensen",
)
TITLES = ("Engineer", "Analyst", "Manager", "Associate", "Director")
CUSTOMERS = (
    "Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wayne", "Tyrell",
    "Soylent",
)
STATUSES = ("shipped", "pending", "cancelled")
YEARS = tuple(range(2015, 2025))

PROMPT = (
    "You are given a SQLite database with this schema:\n\n{schema}\n\n"
    "Question: {question}\n\n"
    "Think step by step, then give one SQLite query that answers the question "
    "in a ```sql code block."
)


def _db_rows(seed: int, k: int) -> dict[str, list[tuple]]:
    """Seeded rows of database ``k``: departments, employees (unique names, salaries), orders."""
    rng = random.Random(f"grpokit/text_to_sql/db/{seed}/{k}")
    n_dep, n_emp, n_ord = rng.randint(4, 6), rng.randint(24, 36), rng.randint(60, 100)
    dep_names = rng.sample(DEPARTMENTS, n_dep)
    budgets = rng.sample(range(100_000, 2_000_001, 10_000), n_dep)
    departments = [(i + 1, dep_names[i], rng.choice(CITIES), budgets[i]) for i in range(n_dep)]
    full_names = rng.sample([f"{f} {l}" for f in FIRST_NAMES for l in LAST_NAMES], n_emp)
    # Unique salaries and amounts keep ORDER BY ... LIMIT answers free of ties.
    salaries = rng.sample(range(40_000, 160_001, 500), n_emp)
    employees = [
        (i + 1, full_names[i], rng.randint(1, n_dep), rng.choice(TITLES), salaries[i],
         rng.choice(YEARS))
        for i in range(n_emp)
    ]
    amounts = rng.sample(range(100, 10_001), n_ord)
    orders = [
        (i + 1, rng.randint(1, n_emp), rng.choice(CUSTOMERS), amounts[i],
         rng.choice(YEARS[4:]), rng.choice(STATUSES))
        for i in range(n_ord)
    ]
    return {"departments": departments, "employees": employees, "orders": orders}


def _db_is_current(path: Path) -> bool:
    """True if ``path`` is a database this module wrote with the current ``DB_VERSION``."""
    try:
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
        try:
            return conn.execute("PRAGMA user_version").fetchone()[0] == DB_VERSION
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def ensure_database(seed: int, k: int, root: Path | None = None) -> Path:
    """Path of ``<root>/sql/<seed>/db_<k>.sqlite``, written first if missing or outdated.

    ``root`` defaults to ``$GRPOKIT_CACHE`` or ``~/.cache/grpokit``. The file is built under a
    temporary name and renamed, so concurrent callers and crashes never leave half a database.
    """
    path = (root or cache_dir()) / "sql" / str(seed) / f"db_{k}.sqlite"
    if path.is_file() and _db_is_current(path):
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError as exc:
        raise ValueError(
            f"task 'text_to_sql': cannot write databases under {path.parent} ({exc.strerror}); "
            "set GRPOKIT_CACHE to a writable folder"
        ) from None
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(SCHEMA)
            for table, rows in _db_rows(seed, k).items():
                marks = ", ".join("?" * len(rows[0]))
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            conn.execute(f"PRAGMA user_version = {DB_VERSION}")
            conn.commit()
        finally:
            conn.close()
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache is shared like any other
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


_JOIN_DEP = "FROM employees AS e JOIN departments AS d ON e.department_id = d.id"
_JOIN_ORD = "FROM orders AS o JOIN employees AS e ON o.employee_id = e.id"
_KINDS = (
    "count_department", "salary_above", "aggregate_by_department", "top_paid", "orders_in_year",
    "employee_order_total", "employee_order_count", "hired_after_in_city", "title_counts",
    "title_since_year", "customer_year_total", "largest_orders", "budget_above",
    "customers_by_status",
)
_AGGREGATES = {"average": "AVG", "highest": "MAX", "lowest": "MIN", "total": "SUM"}


def _question(
    rng: random.Random, db: dict[str, list[tuple]], kinds: tuple[str, ...] = _KINDS
) -> tuple[str, str, str] | None:
    """Draw one (template name, question, gold SQL) whose parameters come from ``db``'s rows.

    None when the drawn compositional template has no well-posed instance here (a tie at a
    LIMIT boundary); the caller draws again.
    """
    dep, emp, order = (rng.choice(db[t]) for t in ("departments", "employees", "orders"))
    seller = db["employees"][order[1] - 1]  # handled ``order``, so order questions are non-empty
    kind = rng.choice(kinds)
    if kind in COMPOSITIONAL_KINDS:
        return compositional_question(kind, rng, db, dep, emp, order, seller)
    if kind == "count_department":
        return kind, f"How many employees work in the {dep[1]} department?", (
            f"SELECT COUNT(*) {_JOIN_DEP} WHERE d.name = '{dep[1]}'")
    if kind == "salary_above":
        s = rng.randrange(50_000, 150_001, 1_000)
        return kind, f"List the names of the employees whose salary is above {s}.", (
            f"SELECT name FROM employees WHERE salary > {s}")
    if kind == "aggregate_by_department":
        word = rng.choice(sorted(_AGGREGATES))
        return kind, (f"What is the {word} salary in each department? "
                      "Give the department name and the value."), (
            f"SELECT d.name, {_AGGREGATES[word]}(e.salary) {_JOIN_DEP} GROUP BY d.name")
    if kind == "top_paid":
        n, high = rng.randint(2, 8), rng.random() < 0.5
        word, direction = ("highest", "DESC") if high else ("lowest", "ASC")
        return kind, (f"Who are the {n} {word}-paid employees? Give their names and salaries, "
                      f"{word} first."), (
            f"SELECT name, salary FROM employees ORDER BY salary {direction} LIMIT {n}")
    if kind == "orders_in_year":
        return kind, f"How many {order[5]} orders were placed in {order[4]}?", (
            f"SELECT COUNT(*) FROM orders WHERE status = '{order[5]}' AND order_year = {order[4]}")
    if kind == "employee_order_total":
        return kind, f"What is the total amount of the orders handled by {seller[1]}?", (
            f"SELECT SUM(o.amount) {_JOIN_ORD} WHERE e.name = '{seller[1]}'")
    if kind == "employee_order_count":
        return kind, f"How many {order[5]} orders did {seller[1]} handle?", (
            f"SELECT COUNT(*) {_JOIN_ORD} WHERE e.name = '{seller[1]}' AND o.status = '{order[5]}'")
    if kind == "hired_after_in_city":
        year = rng.choice(YEARS[:-2])
        return kind, (f"Which employees were hired after {year} and work in a department located "
                      f"in {dep[2]}? Give their names."), (
            f"SELECT e.name {_JOIN_DEP} WHERE e.hire_year > {year} AND d.city = '{dep[2]}'")
    if kind == "title_counts":
        return kind, (f"How many employees of the {dep[1]} department hold each job title? "
                      "Give the title and the count."), (
            f"SELECT e.title, COUNT(*) {_JOIN_DEP} WHERE d.name = '{dep[1]}' GROUP BY e.title")
    if kind == "title_since_year":
        return kind, (f"List the names of the employees with the title {emp[3]} who were hired "
                      f"in or after {emp[5]}."), (
            f"SELECT name FROM employees WHERE title = '{emp[3]}' AND hire_year >= {emp[5]}")
    if kind == "customer_year_total":
        return kind, (f"What is the total amount of the orders of customer {order[2]} placed "
                      f"in {order[4]}?"), (
            "SELECT SUM(amount) FROM orders "
            f"WHERE customer = '{order[2]}' AND order_year = {order[4]}")
    if kind == "largest_orders":
        n = rng.randint(2, 5)
        return kind, (f"What are the {n} largest orders of customer {order[2]}? Give the order "
                      "ids and amounts, largest first."), (
            f"SELECT id, amount FROM orders WHERE customer = '{order[2]}' "
            f"ORDER BY amount DESC LIMIT {n}")
    if kind == "budget_above":
        b = rng.randrange(50_000, dep[3], 50_000)  # below dep's budget: at least one row
        return kind, f"Which departments have a budget above {b}? Give their names and cities.", (
            f"SELECT name, city FROM departments WHERE budget > {b}")
    cut = rng.randrange(1_000, 9_001, 100)
    return kind, (f"Which customers have {order[5]} orders with an amount above {cut}? "
                  "List each customer once."), (
        f"SELECT DISTINCT customer FROM orders WHERE status = '{order[5]}' AND amount > {cut}")


TEMPLATE_POOLS = {
    "basic": _KINDS, "compositional": COMPOSITIONAL_KINDS, "all": _KINDS + COMPOSITIONAL_KINDS,
}


@TASKS.register("text_to_sql")
def text_to_sql(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    n_databases: int = 4,
    template: str = PROMPT,
    templates: str = "basic",
) -> TaskSplits:
    """Text-to-SQL over generated SQLite databases; answer is a gold SELECT, checked by execution.

    ``n_databases`` files per seed (cached under ``<cache>/sql/<seed>/``); each row is asked
    about one of them (``db_path``). ``template`` formats ``{schema}`` and ``{question}``.
    ``templates``: the question pool, ``basic`` | ``compositional`` | ``all`` (module docstring).
    Pair with the rewards ``sql_execution``, ``sql_executes``, ``sql_schema_f1``, ``sql_format``.
    """
    if isinstance(n_databases, bool) or not isinstance(n_databases, int) or n_databases < 1:
        raise ValueError(
            f"task 'text_to_sql': option 'n_databases' must be an int >= 1, got {n_databases!r}"
        )
    if templates not in TEMPLATE_POOLS:
        raise ValueError(
            f"task 'text_to_sql': option 'templates' must be one of {', '.join(TEMPLATE_POOLS)}, "
            f"got {templates!r}"
        )
    kinds = TEMPLATE_POOLS[templates]
    paths = [str(ensure_database(seed, k)) for k in range(n_databases)]
    dbs = [_db_rows(seed, k) for k in range(n_databases)]

    def draw(rng: random.Random) -> dict:
        drawn = None
        while drawn is None:  # a compositional draw without a well-posed instance is redrawn
            k = rng.randrange(n_databases)
            drawn = _question(rng, dbs[k], kinds)
        kind, question, sql = drawn
        return {
            "prompt": template.format(schema=SCHEMA, question=question),
            "answer": sql,
            "db_path": paths[k],
            "schema": SCHEMA,
            "question": question,
            "domain": kind,
            "task": "text_to_sql",
        }

    return _sample_splits("text_to_sql", seed, n_train, n_heldout, draw, enlarge="n_databases")
