"""benchmarks/ts_sql_eval.py --dry-run: greedy ts_sql held-out completions of the tiny model, every reward and the spans."""

import json
import re


def test_ts_sql_eval_dry_run_prints_every_reward_and_the_plan_span(dry_run, tmp_path):
    last = dry_run("benchmarks/ts_sql_eval.py").strip().splitlines()[-1]
    keys = ["sql_execution", "sql_executes", "sql_schema_f1", "sql_format", "has_plan_span", "plan_char_frac", "numbered_plan", "n"]
    assert re.fullmatch(" ".join(rf"{k}=\d+\.\d{{3}}" for k in keys), last), last
    written = json.loads((tmp_path / "ts_sql_eval.json").read_text())
    assert written["n"] == 4 and 0 <= written["sql_format"] <= 1
