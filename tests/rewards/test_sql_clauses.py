"""Text-to-SQL partial rewards (Sparks, arXiv 2505.00016): clause F1, normalised string match, LLM-judge grade."""

import string

import pytest
import torch

from grpokit.data.chat import render_prompt
from grpokit.rewards import REWARDS
from grpokit.rewards.judge import clear_judge_cache, load_judge
from grpokit.rewards.loading import RewardLoadError, check_reward_options
from grpokit.rewards.sql_judge import DEFAULT_SQL_TEMPLATE, expected_grade, grade_token_ids
from grpokit.rewards.sql_match import clause_items, normalised_sql
from grpokit.testing import save_tiny_model, tiny_tokenizer


def block(sql):
    return f"Reasoning first.\n```sql\n{sql}\n```"


def f1(pred, gold, **options):
    return REWARDS.get("sql_clause_f1")(["q"], [block(pred)], answer=[gold], **options)[0]


def match(pred, gold):
    return REWARDS.get("sql_string_match")(["q"], [block(pred)], answer=[gold])[0]


def test_select_ab_against_ac_is_one_half():
    # SELECT {a, b} vs {a, c}: |P∩G| = 1, F1 = 2·1 / (2 + 2) = 0.5
    assert f1("SELECT a, b FROM t", "SELECT a, c FROM t", clauses=["select"]) == 0.5
    # default clauses: SELECT 0.5, FROM {t} vs {t} 1.0; WHERE/GROUP BY/ORDER BY in neither query -> mean(0.5, 1.0)
    assert f1("SELECT a, b FROM t", "SELECT a, c FROM t") == 0.75


def test_clause_f1_hand_computed():
    gold = "SELECT name FROM employees WHERE salary > 5 AND title = 'Analyst'"
    # WHERE {salary > 5} vs {salary > 5, title = 'Analyst'}: 2·1/(1+2) = 2/3; SELECT 1, FROM 1 -> (1 + 1 + 2/3)/3
    assert f1("SELECT name FROM employees WHERE salary > 5", gold) == pytest.approx(8 / 9, abs=1e-12)
    # ORDER BY salary ASC vs salary DESC share no item: (1 + 1 + 0)/3
    assert f1("SELECT name FROM t ORDER BY salary", "SELECT name FROM t ORDER BY salary DESC") == pytest.approx(2 / 3, abs=1e-12)
    # a GROUP BY only the gold has: F1(∅, {d}) = 0 -> SELECT {d, COUNT(*)} 1, FROM 1, GROUP BY 0
    assert f1("SELECT d, COUNT(*) FROM t", "SELECT d, COUNT(*) FROM t GROUP BY d") == pytest.approx(2 / 3, abs=1e-12)


def test_aliases_layout_and_operand_order_do_not_count_in_clause_f1_but_do_in_string_match():
    gold = ("SELECT d.name, COUNT(*) FROM employees AS e JOIN departments AS d ON e.department_id = d.id "
            "WHERE d.city = 'Lima' GROUP BY d.name")
    pred = ("select departments.name, count(*) from departments join employees on departments.id = employees.department_id "
            "where 'Lima' = departments.city group by departments.name")
    assert f1(pred, gold) == 1.0
    assert match(pred, gold) == 0.0  # semantically equal, textually different
    items = clause_items(gold)
    assert items["from"] == {"employees", "departments", "ON departments.id = employees.department_id"}
    # one table: an unqualified column is that table's; a projection alias in ORDER BY is its expression
    assert clause_items("SELECT SUM(amount) AS total FROM orders ORDER BY total DESC")["order_by"] == {"SUM(orders.amount) DESC"}


def test_string_match_normalises_layout_case_quotes_and_semicolon_only():
    gold = "SELECT name FROM employees WHERE salary > 3"
    assert match(gold, gold) == 1.0
    assert match('select  NAME\nfrom "Employees" where salary>3;', gold) == 1.0
    assert match("SELECT name FROM employees WHERE 3 < salary", gold) == 0.0
    assert match("SELECT name FROM employees WHERE salary > 3 AND 1 = 1", gold) == 0.0
    assert normalised_sql("SELECT a FROM t WHERE b != 'X'") == "SELECT a FROM t WHERE b <> 'X'"  # literals keep their case


def test_unparseable_missing_and_gold_none():
    for name in ("sql_clause_f1", "sql_string_match"):
        fn = REWARDS.get(name)
        completions = [block("SELEC name FROM"), "no query here", block("SELECT 1; SELECT 2"), block("SELECT 1")]
        assert fn(["q"] * 4, completions, answer=["SELECT 1", "SELECT 1", "SELECT 1", None]) == [0.0, 0.0, 0.0, None]
        with pytest.raises(ValueError, match="needs a 'answer' column"):
            fn(["q"], [block("SELECT 1")])


def test_schema_resolves_unqualified_columns_of_a_join(tmp_path):
    import sqlite3

    db = tmp_path / "d.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE a (id INT, x INT); CREATE TABLE b (id INT, y INT);")
    conn.close()
    gold, pred = "SELECT a.x FROM a JOIN b ON a.id = b.id", "SELECT x FROM a JOIN b ON a.id = b.id"
    fn = REWARDS.get("sql_clause_f1")
    # without the schema 'x' stays unqualified: SELECT {x} vs {a.x} = 0, FROM 1 -> 0.5; with it, 'x' is a.x -> 1.0
    assert fn(["q"], [block(pred)], answer=[gold], clauses=["select", "from"]) == [0.5]
    assert fn(["q"], [block(pred)], answer=[gold], db_path=[str(db)], clauses=["select", "from"]) == [1.0]


def test_unknown_options_are_refused():
    with pytest.raises(RewardLoadError, match="'clause'.*not an option of reward 'sql_clause_f1'"):
        check_reward_options("sql_clause_f1", REWARDS.get("sql_clause_f1"), {"clause": ["select"]}, "rewards[0].kwargs")
    with pytest.raises(RewardLoadError, match="not an option of reward 'sql_judge'"):
        check_reward_options("sql_judge", REWARDS.get("sql_judge"), {"judge": "x"}, "rewards[0].kwargs")
    with pytest.raises(ValueError, match="option 'clauses'.*selec"):
        f1("SELECT a FROM t", "SELECT a FROM t", clauses=["selec"])
    with pytest.raises(ValueError, match="option 'scale'"):
        REWARDS.get("sql_judge")(["q"], [block("SELECT 1")], answer=["SELECT 1"], scale=10)


def test_expected_grade_hand_computed():
    grades = [(0,), (1,), (2, 3)]  # K = 3; grade 3 has two spellings
    # grade masses e^0, e^0, e^0 + e^0 -> p = (1/4, 1/4, 1/2); levels (0, 0.5, 1) -> 0.125 + 0.5 = 0.625
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0, 9.0]])  # token 4 is no grade: renormalised away
    assert expected_grade(logits, grades).tolist() == pytest.approx([0.625], abs=1e-12)
    assert expected_grade(torch.tensor([[50.0, 0.0, 0.0, 0.0, 0.0]]), grades).item() == pytest.approx(0.0, abs=1e-12)


def test_grade_tokens_of_a_character_tokenizer():
    tok = tiny_tokenizer()
    # ids: 4 specials, then string.printable ("0123456789…"): "1" -> 5 … "5" -> 9; " k" spellings share " ": dropped
    assert string.printable.index("1") == 1
    assert grade_token_ids(tok, render_prompt(tok, "Grade it."), 5) == [(5,), (6,), (7,), (8,), (9,)]


def test_sql_judge_is_the_judges_expected_grade(tmp_path):
    clear_judge_cache()
    path = save_tiny_model(tmp_path / "judge", seed=1)
    prompts, gold = ["Schema ... Question: how many?"] * 2, ["SELECT COUNT(*) FROM t"] * 2
    completions = [block("SELECT COUNT(*) FROM t"), "I do not know"]
    got = REWARDS.get("sql_judge")(prompts, completions, answer=gold, judge_model=path, device="cpu")
    judge = load_judge(path, "cpu")
    text = render_prompt(judge.tokenizer, DEFAULT_SQL_TEMPLATE.replace("{scale}", "5").format(
        prompt=prompts[0], a=gold[0], b="SELECT COUNT(*) FROM t"))
    ids = judge.tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        p = judge.model(input_ids=ids).logits[0, -1].double()[5:10].softmax(-1)  # grades 1..5 are ids 5..9
    assert got[0] == pytest.approx(float(p @ torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64)), abs=1e-6)
    assert got[1] == 0.0  # no query: not judged
    assert REWARDS.get("sql_judge")(prompts[:1], completions[:1], answer=[None], judge_model=path) == [None]
    clear_judge_cache()
