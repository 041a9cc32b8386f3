"""TS-SQL in miniature: records of a question, a plan and the SQL, over the generated SQLite databases.

Thinkquel (Li, Attar, Dong, "Thinkquel: A Model Dedicated to Text-to-dbt Using Synthetic Data and
a Span-Aware Objective", arXiv 2510.00186) trains on TS-SQL, a synthetic set built by a pipeline:
enumerate model configurations programmatically, execute each against a real warehouse and keep
the executable ones, refine them with a code model, write natural-language requests, and keep the
pairs an LLM judge scores >= 9/10. Its policy answers with a planning span, then the query; TS-GRPO
trains the plan token by token and the query as one sequence.

Here, in miniature (task ``ts_sql``):

1. *enumerate*: the question templates of ``text_to_sql`` (the ``all`` pool: one- to three-table
   queries with WHERE, GROUP BY, HAVING, ORDER BY/LIMIT) over ``n_databases`` generated SQLite
   files (:mod:`grpokit.data.sql_task`);
2. *execute and keep*: the gold query runs read-only on its database; a record is kept only if it
   executes and returns rows (:func:`executes`); its result's hash is stored
   (``exec_result_hash``, order-free unless the query has a top-level ORDER BY);
3. *plan*: the plan is written from the parsed gold query, one numbered step per clause in the
   order the query is evaluated (:func:`grpokit.data.sql_cot.cot_trace`), and the plan's query
   is checked to return the gold rows.

The code-model refinement, the written requests and the judge filter need large models the
paper names (Qwen3-Coder-480B, Claude Sonnet 4) and are not reproduced: the templates already
write the request, and a template record is exact by construction [inferred]. The targets are
SQLite SQL, not dbt. Rows carry the reference completion in the paper's format (``reference``:
the plan, then the query in a ```sql block; also the demonstration writer ``ts_sql`` for an
SFT stage); the planning span of a sampled completion is its text through the opening ```sql
fence (``algorithm.plan_delimiter``), the answer span the query and the closing fence.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, field

from grpokit.data.demonstrations import DEMONSTRATIONS
from grpokit.data.sql_cot import cot_trace
from grpokit.data.sql_task import SCHEMA, TEMPLATE_POOLS, _db_rows, _question, ensure_database
from grpokit.data.tasks import TASKS, TaskSplits, _sample_splits
from grpokit.rewards.sql import _normalise, extract_sql, has_top_level_order_by, results_match, run_sql_readonly

PLAN_DELIMITER = "```sql"
PROMPT = (
    "You are given a SQLite database with this schema:\n\n{schema}\n\n"
    "Question: {question}\n\n"
    "First write a plan: numbered steps, one per clause (tables, joins, filters, grouping, "
    "aggregation, ordering, selection). Then give one SQLite query that answers the question "
    "in a ```sql code block."
)


@dataclass(frozen=True)
class TsSqlRecord:
    """One TS-SQL record: the request, the schema, the plan and the SQL, with its execution's fingerprint.

    ``exec_result_hash``: sha256 of the gold result (rows sorted unless ordered); ``judge_score``
    is None (no judge filter runs here); ``meta``: template kind, database index, rows returned.
    """

    question: str
    schema: str
    plan: str
    sql: str
    db_path: str
    exec_result_hash: str
    judge_score: float | None = None
    meta: dict = field(default_factory=dict)

    def completion(self) -> str:
        """The reference completion: the plan, then the query in a ```sql block."""
        return f"{self.plan}\n```sql\n{self.sql}\n```"


def result_hash(rows: list[tuple], ordered: bool) -> str:
    """sha256 of a query result: floats rounded to 6 decimals, rows sorted (by repr) unless ``ordered``."""
    normal = [repr(_normalise(r)) for r in rows]
    return hashlib.sha256("\n".join(normal if ordered else sorted(normal)).encode()).hexdigest()


def executes(record_sql: str, db_path: str) -> tuple[list[tuple] | None, str | None]:
    """The filter predicate of step 2: the gold rows, or (None, why) if the query fails or returns nothing."""
    rows, error = run_sql_readonly(db_path, record_sql)
    if error is not None:
        return None, error
    return (rows, None) if rows else (None, "empty result")


def make_record(kind: str, question: str, sql: str, db_path: str, k: int) -> TsSqlRecord | None:
    """Steps 2 and 3 for one enumerated question: None if it does not execute or its plan's query disagrees."""
    rows, _ = executes(sql, db_path)
    if rows is None:
        return None
    trace = cot_trace(sql)
    plan, _, _ = trace.partition("\n" + PLAN_DELIMITER)
    rendered = extract_sql(trace)  # the plan's own query (the clauses re-rendered)
    ordered = has_top_level_order_by(sql)
    planned, error = run_sql_readonly(db_path, rendered)
    if error is not None or not results_match(planned, rows, ordered):
        return None
    return TsSqlRecord(
        question=question, schema=SCHEMA, plan=plan, sql=rendered, db_path=db_path,
        exec_result_hash=result_hash(rows, ordered), meta={"kind": kind, "database": k, "rows": len(rows)},
    )


@TASKS.register("ts_sql")
def ts_sql(
    seed: int,
    n_train: int,
    n_heldout: int,
    *,
    n_databases: int = 4,
    templates: str = "all",
    template: str = PROMPT,
) -> TaskSplits:
    """Plan-then-SQL records (TS-SQL in miniature, Thinkquel arXiv 2510.00186) over generated SQLite databases.

    Rows: ``prompt`` (schema + question + the plan-then-SQL instruction, formatted by
    ``template`` over ``{schema}`` and ``{question}``), ``answer`` (gold SQL), ``db_path``,
    ``plan``, ``reference`` (plan + ```sql block), ``exec_result_hash``, ``schema``,
    ``question``, ``domain`` (template kind), ``task``. ``templates``: ``basic`` |
    ``compositional`` | ``all`` (as ``text_to_sql``). Pair with the rewards ``sql_execution``,
    ``sql_executes``, ``sql_schema_f1``, ``sql_format`` and ``algorithm.plan_delimiter: "```sql"``.
    """
    if isinstance(n_databases, bool) or not isinstance(n_databases, int) or n_databases < 1:
        raise ValueError(f"task 'ts_sql': option 'n_databases' must be an int >= 1, got {n_databases!r}")
    if templates not in TEMPLATE_POOLS:
        raise ValueError(f"task 'ts_sql': option 'templates' must be one of {', '.join(TEMPLATE_POOLS)}, got {templates!r}")
    if not isinstance(template, str) or "{question}" not in template:
        raise ValueError(f"task 'ts_sql': option 'template' must be a string with a {{question}} field, got {template!r}")
    kinds = TEMPLATE_POOLS[templates]
    paths = [str(ensure_database(seed, k)) for k in range(n_databases)]
    dbs = [_db_rows(seed, k) for k in range(n_databases)]

    def draw(rng: random.Random) -> dict:
        record = None
        while record is None:  # a question with no well-posed instance, no rows or a disagreeing plan is redrawn
            k = rng.randrange(n_databases)
            drawn = _question(rng, dbs[k], kinds)
            record = None if drawn is None else make_record(*drawn, paths[k], k)
        row = {key: v for key, v in asdict(record).items() if key not in ("sql", "meta", "judge_score")}
        return {
            **row, "prompt": template.format(schema=record.schema, question=record.question), "answer": record.sql,
            "reference": record.completion(), "domain": record.meta["kind"], "task": "ts_sql",
        }

    return _sample_splits("ts_sql", seed, n_train, n_heldout, draw, enlarge="n_databases")


@DEMONSTRATIONS.register("ts_sql")
def ts_sql_demonstration(row: dict) -> str:
    """The reference completion of a ``ts_sql`` row (column ``reference``): its plan, then its SQL block."""
    reference = row.get("reference")
    if not isinstance(reference, str) or PLAN_DELIMITER not in reference:
        raise ValueError("its 'reference' column holds no plan-then-SQL completion (use data.task ts_sql)")
    return reference
