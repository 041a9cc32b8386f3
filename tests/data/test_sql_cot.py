"""Tests for the compositional text_to_sql templates, the clause-level CoT traces and the two presets.

Sparks of Tabular Reasoning via Text2SQL Reinforcement Learning (Stoisser et al., arXiv 2505.00016):
stage 1 SFT on clause-by-clause traces from gold SQL, stage 2 GRPO with the execution reward.
"""

import dataclasses
from collections import Counter

import pytest

from grpokit.config import load_config
from grpokit.config.loading import ConfigError
from grpokit.data.demonstrations import DEMONSTRATIONS
from grpokit.data.files import DataError
from grpokit.data.offline import load_offline_splits
from grpokit.data.sql_cot import cot_trace, parse_sql, sql_cot
from grpokit.data.sql_task import TEMPLATE_POOLS, _db_rows
from grpokit.data.sql_templates import COMPOSITIONAL_KINDS
from grpokit.data.tasks import TASKS
from grpokit.rewards import REWARDS
from grpokit.rewards.sql import extract_sql, run_sql_readonly
from grpokit.trainer.inputs import RunContractError, check_run


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def all_rows(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("GRPOKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    splits = TASKS.get("text_to_sql")(seed=0, n_train=400, n_heldout=100, templates="all")
    yield splits.train + splits.heldout
    mp.undo()


# ---------------------------------------------------------------- the task's question pools
def test_basic_pool_is_the_default_and_unchanged():
    # The first gold queries of seed 0, as the task wrote them before the compositional pool existed.
    rows = TASKS.get("text_to_sql")(seed=0, n_train=3, n_heldout=0).train
    assert [r["answer"] for r in rows] == [
        "SELECT name, city FROM departments WHERE budget > 350000",
        "SELECT SUM(amount) FROM orders WHERE customer = 'Acme' AND order_year = 2021",
        "SELECT COUNT(*) FROM orders AS o JOIN employees AS e ON o.employee_id = e.id "
        "WHERE e.name = 'Ada Diallo' AND o.status = 'shipped'",
    ]
    assert TASKS.get("text_to_sql")(seed=0, n_train=3, n_heldout=0, templates="basic").train == rows


def test_compositional_pool_is_deterministic_and_every_gold_query_returns_rows(all_rows):
    again = TASKS.get("text_to_sql")(seed=0, n_train=400, n_heldout=100, templates="all")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "db_path"} for r in rows]  # noqa: E731 (another cache folder)
    assert strip(again.train + again.heldout) == strip(all_rows)
    kinds = Counter(r["domain"] for r in all_rows)
    assert set(kinds) == set(TEMPLATE_POOLS["all"])  # both pools, every template drawn
    comp = TASKS.get("text_to_sql")(seed=0, n_train=60, n_heldout=0, templates="compositional").train
    assert {r["domain"] for r in comp} <= set(COMPOSITIONAL_KINDS)
    for row in all_rows:
        result, error = run_sql_readonly(row["db_path"], row["answer"])
        assert error is None and result, row["answer"]
    joined = [r for r in all_rows if r["answer"].count(" JOIN ") == 2]
    assert joined and all(r["domain"] in COMPOSITIONAL_KINDS for r in joined)


def test_ranking_questions_stop_before_a_tie(all_rows):
    ranked = [r for r in all_rows if r["domain"] in ("top_customers", "top_sellers", "department_average_order")]
    assert ranked
    for row in ranked:
        head, n = row["answer"].rsplit(" LIMIT ", 1)
        everything, _ = run_sql_readonly(row["db_path"], head)
        values = [round(v[-1], 6) for v in everything][: int(n) + 1]
        assert len(set(values)) == len(values), row["answer"]  # the n shown and the next all differ


def test_headcount_having_matches_a_count_over_the_generated_rows(all_rows):
    rows = [r for r in all_rows if r["domain"] == "departments_over_headcount"]
    assert rows
    for row in rows:
        n = int(row["answer"].rsplit("> ", 1)[1])
        db = _db_rows(0, int(row["db_path"].rsplit("db_", 1)[1].split(".")[0]))
        heads = Counter(e[2] for e in db["employees"])
        expected = {(d[1], heads[d[0]]) for d in db["departments"] if heads[d[0]] > n}
        assert set(run_sql_readonly(row["db_path"], row["answer"])[0]) == expected and expected


def test_bad_templates_option_is_one_line():
    with pytest.raises(ValueError, match="option 'templates' must be one of basic, compositional, all, got 'joins'"):
        TASKS.get("text_to_sql")(seed=0, n_train=1, n_heldout=1, templates="joins")


# ---------------------------------------------------------------- the trace synthesiser
def test_trace_of_a_filtered_join_count():
    sql = "SELECT COUNT(*) FROM employees AS e JOIN departments AS d ON e.department_id = d.id WHERE d.name = 'Sales'"
    assert cot_trace(sql) == (
        "1. Tables: employees (as e) and departments (as d).\n"
        "2. Join: departments to employees on e.department_id = d.id.\n"
        "3. Filter: keep the rows where d.name = 'Sales'.\n"
        "4. Aggregate: COUNT(*) over the kept rows.\n"
        "5. Select: COUNT(*).\n"
        f"```sql\n{sql}\n```"
    )


def test_trace_of_grouping_having_ordering_and_limit():
    sql = ("select e.name, sum(o.amount) from orders o inner join employees as e on o.employee_id = e.id "
           "where o.status = 'shipped' and o.amount between 10 and 20 group by e.name "
           "having count(*) > 1 order by sum(o.amount) desc, e.name limit 3;")
    assert cot_trace(sql) == (
        "1. Tables: orders (as o) and employees (as e).\n"
        "2. Join: employees to orders on o.employee_id = e.id.\n"
        "3. Filter: keep the rows where o.status = 'shipped' and o.amount between 10 and 20.\n"
        "4. Group: by e.name.\n"
        "5. Aggregate: sum(o.amount) for each group.\n"
        "6. Group filter: keep the groups where count(*) > 1.\n"
        "7. Order: by sum(o.amount), descending.\n"
        "8. Order: by e.name, ascending.\n"
        "9. Limit: the first 3 rows.\n"
        "10. Select: e.name, sum(o.amount).\n"
        "```sql\nSELECT e.name, sum(o.amount) FROM orders AS o JOIN employees AS e ON o.employee_id = e.id "
        "WHERE o.status = 'shipped' AND o.amount between 10 and 20 GROUP BY e.name HAVING count(*) > 1 "
        "ORDER BY sum(o.amount) desc, e.name LIMIT 3\n```"
    )


def test_trace_of_a_distinct_single_table_query_keeps_literals_and_subqueries():
    sql = ("SELECT DISTINCT customer FROM orders WHERE status = 'group by; and' "
           "AND amount > (SELECT AVG(amount) FROM orders WHERE status = 'shipped')")
    trace = cot_trace(sql)
    assert trace.splitlines()[:3] == [
        "1. Tables: orders.",
        "2. Filter: keep the rows where status = 'group by; and' and "
        "amount > (SELECT AVG(amount) FROM orders WHERE status = 'shipped').",
        "3. Select: distinct customer.",
    ]
    assert extract_sql(trace) == sql  # the literal's keywords and the subquery's clauses stayed put


@pytest.mark.parametrize("sql, reason", [
    ("SELECT a FROM t UNION SELECT b FROM u", "'UNION' is not supported"),
    ("SELECT a FROM t LEFT JOIN u ON t.x = u.x", "'LEFT' is not supported"),
    ("WITH c AS (SELECT 1) SELECT * FROM c", "'WITH' is not supported"),
    ("SELECT a FROM t, u", "comma joins"),
    ("SELECT a FROM t JOIN u", "a JOIN without ON"),
    ("SELECT a FROM t LIMIT n", "not a row count"),
    ("42", "does not start with SELECT"),
])
def test_unsupported_queries_are_refused_by_name(sql, reason):
    with pytest.raises(ValueError, match=reason):
        parse_sql(sql)


def test_every_template_trace_executes_to_the_gold_result(all_rows):
    by_kind = {}
    for row in all_rows:
        by_kind.setdefault(row["domain"], []).append(row)
    assert set(by_kind) == set(TEMPLATE_POOLS["all"])
    rows = [r for kind_rows in by_kind.values() for r in kind_rows[:3]]
    traces = [sql_cot(r) for r in rows]
    scores = REWARDS.get("sql_execution")(
        [r["prompt"] for r in rows], traces, answer=[r["answer"] for r in rows], db_path=[r["db_path"] for r in rows])
    assert scores == [1.0] * len(rows)
    assert REWARDS.get("sql_format")([""] * len(rows), traces) == [1.0] * len(rows)
    assert all(parse_sql(r["answer"]).sql() == r["answer"] for r in all_rows)  # the parse round-trips the gold text
    assert sql_cot(rows[0]) == traces[0]  # deterministic


def test_a_trace_that_would_not_return_the_gold_rows_is_refused(all_rows):
    row = next(r for r in all_rows if r["domain"] == "top_paid")
    bad = {**row, "answer": row["answer"].replace("FROM employees", "FROM employees AS employees x")}
    with pytest.raises(ValueError, match="is not a gold SQL query this writer reads"):
        sql_cot(bad)
    with pytest.raises(ValueError, match="holds no gold SQL"):
        sql_cot({**row, "answer": None})


# ---------------------------------------------------------------- presets and config errors
def test_cot_sft_preset_rows_are_the_traces_of_the_train_split():
    cfg = load_config(preset="sql_cot_sft", overrides=["data.n_train=12", "data.n_heldout=4"])
    assert cfg.stage == "sft" and cfg.data.demonstrations == "sql_cot" and "sql_cot" in DEMONSTRATIONS
    splits = load_offline_splits(cfg.data, cfg.stage)
    task = TASKS.get("text_to_sql")(seed=0, n_train=12, n_heldout=4, **cfg.data.task_options)
    assert [r["prompt"] for r in splits.train] == [r["prompt"] for r in task.train]
    for row, source in zip(splits.train + splits.heldout, task.train + task.heldout):
        assert row["completion"] == cot_trace(source["answer"])
        assert row["answer"] == source["answer"] and row["db_path"] == source["db_path"]  # held-out accuracy is scored


def test_after_cot_preset_is_the_sql_recipe_from_the_sft_run():
    """Stage 2 is the sql recipe from the SFT run, with the setting measured to keep the SFT gain.

    Execution reward only, lr 2e-6 and a KL to the stage's start (the SFT model): 41.7% -> 51.7%, where
    the recipe's composite reward at lr 2e-5 took 15% -> 1.7% (docs/pipelines.md).
    """
    sql, after = load_config(preset="sql"), load_config(preset="sql_after_cot")
    sft = load_config(preset="sql_cot_sft")
    assert after.model.name == sft.logging.output_dir == "runs/sql_cot_sft"
    assert after.stage == "grpo" and [r.name for r in after.rewards] == ["sql_execution"]
    assert after.rewards[0] == sql.rewards[0]
    assert after.optim.lr == 2e-6 and after.algorithm.beta == 0.05
    assert dataclasses.replace(after.algorithm, beta=sql.algorithm.beta) == sql.algorithm
    assert after.data.task_options == sft.data.task_options and after.data.seed == sft.data.seed
    assert after.rollout.max_new_tokens >= 160  # room for the steps and the query
    check_run(after)


def test_the_benchmarks_base_model_arm_keeps_the_sql_recipe():
    """Arm (a) of benchmarks/sql_cot.py starts from the base model (0% execution): the paper's composite reward, lr, no KL."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    from sql_cot import ARM_A

    sql = load_config(preset="sql")
    arm_a = load_config(preset="sql_after_cot", overrides=ARM_A)
    assert arm_a.rewards == sql.rewards and arm_a.optim.lr == sql.optim.lr and arm_a.algorithm == sql.algorithm


def test_cot_rows_from_a_task_without_gold_sql_are_one_line():
    cfg = load_config(overrides=["stage=sft", "data.task=arithmetic", "data.demonstrations=sql_cot"])
    with pytest.raises(DataError) as err:
        load_offline_splits(cfg.data, cfg.stage)
    message = str(err.value)
    assert "\n" not in message and message.startswith("data.demonstrations 'sql_cot' cannot write a completion for data.task 'arithmetic'")
    assert "not a gold SQL query" in message


def test_demonstrations_outside_an_sft_task_run_are_refused():
    with pytest.raises(ConfigError, match="data.demonstrations = 'sql_trace' is not a registered demonstration"):
        load_config(preset="sql_cot_sft", overrides=["data.demonstrations=sql_trace"])
    grpo = load_config(preset="sql", overrides=["data.demonstrations=sql_cot"])
    with pytest.raises(RunContractError, match="stage 'grpo' does not read them: set data.demonstrations=null"):
        check_run(grpo)
    with pytest.raises(DataError, match="without data.path"):
        load_offline_splits(load_config(preset="sql_cot_sft", overrides=["data.path=x.jsonl"]).data, "sft")


# ---------------------------------------------------------------- the method acting on the real model
COT_FORMAT = '''
def cot_format(prompts, completions, **kwargs):
    """1.0 if the completion opens with the trace's first step, else 0.0."""
    return [float(c.lstrip().startswith("1. Tables:")) for c in completions]
'''


@pytest.mark.slow
def test_a_few_cot_sft_steps_make_smollm2_write_the_trace_format(tmp_path):
    """Greedy held-out completions open with the clause-by-clause steps more often after 8 SFT steps than before."""
    import json

    from grpokit.cli import main

    (tmp_path / "cot_format.py").write_text(COT_FORMAT)
    run = tmp_path / "run"
    assert main(["train", "--preset", "sql_cot_sft", "--set", f"logging.output_dir={run}", "--set", "train.steps=8",
                 "--set", "data.n_train=64", "--set", "data.n_heldout=12", "--set", "eval.before=true",
                 "--set", "eval.after=true", "--set", "eval.max_new_tokens=8", "--set", "logging.progress=false",
                 "--set", f"rewards=[{{name: '{tmp_path / 'cot_format.py'}:cot_format', weight: 1.0}}]",
                 "--set", "eval.accuracy_reward=cot_format"]) == 0
    evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines() if x.strip()]
    share = [e["accuracy"] for e in evals if e.get("split") == "heldout" and "accuracy" in e]
    assert share[0] < 0.5 and share[-1] > share[0] + 0.4, share  # base SmolLM2 does not open with "1. Tables:"
