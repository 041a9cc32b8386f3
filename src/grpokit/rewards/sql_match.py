"""Text-to-SQL rewards that compare the predicted query with the gold one: clause F1, normalised match, LLM judge.

The partial rewards of "Sparks of Tabular Reasoning via Text2SQL Reinforcement Learning"
(Stoisser et al., arXiv 2505.00016), besides execution accuracy (``sql_execution``):

* ``sql_clause_f1``: F1 between the item sets of each clause (SELECT, FROM/JOIN, WHERE,
  GROUP BY, ORDER BY), averaged over the clauses either query has;
* ``sql_string_match``: exact match of the two queries after normalisation;
* ``sql_judge``: an LLM judge's ordinal score of the prediction against the gold query, mapped
  to [0, 1] (:mod:`grpokit.rewards.sql_judge`).

Queries are parsed with sqlglot (SQLite dialect), imported on first use. The paper names the
components but not their exact definitions: the item sets, the alias resolution and the
normalisation below are [inferred].
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from grpokit.rewards.builtin import REWARDS, _require
from grpokit.rewards.sql import _f1, _schema_names, extract_sql

CLAUSES = ("select", "from", "where", "group_by", "order_by", "having", "limit")
DEFAULT_CLAUSES = ("select", "from", "where", "group_by", "order_by")
# longer queries are not parsed (0.0): sqlglot's time grows with the text a policy may write
_MAX_PARSE_CHARS = 20_000
_BARE = re.compile(r"[a-z_][a-z0-9_]*")


def sqlglot_tree(sql: str):
    """The sqlglot tree of one SQLite statement, or None (a parse error, several statements, too long)."""
    import sqlglot
    from sqlglot import exp

    if not sql or len(sql) > _MAX_PARSE_CHARS:
        return None
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return None
    return tree if isinstance(tree, (exp.Query,)) else None  # "SELECT 1; SELECT 2" parses as a Block


def _bare_identifiers(tree) -> None:
    """Lower-case every identifier and drop its quotes (SQLite compares identifiers case-insensitively)."""
    from sqlglot import exp

    for ident in tree.find_all(exp.Identifier):
        name = ident.name.lower()
        ident.set("this", name)
        ident.set("quoted", not _BARE.fullmatch(name))


def normalised_sql(sql: str) -> str | None:
    """``sql`` rendered by sqlglot with lower-cased, unquoted identifiers; None if it does not parse.

    Whitespace, keyword case, identifier case and quoting, a trailing ';' and spellings such as
    ``!=`` / ``<>`` are normalised away; anything else (aliases, operand order, the form of a
    condition) is kept, so two semantically equal queries can still differ.
    """
    tree = sqlglot_tree(sql)
    if tree is None:
        return None
    _bare_identifiers(tree)
    return tree.sql(dialect="sqlite")


def _conjuncts(condition) -> list:
    from sqlglot import exp

    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _resolve_columns(select, schema: dict[str, frozenset[str]] | None) -> None:
    """Qualify columns by their table's name (not its alias), and inline projection aliases in later clauses.

    ``e.name`` with ``employees AS e`` becomes ``employees.name``; an unqualified column becomes
    ``<table>.<column>`` when the query reads one table, or when ``schema`` says exactly one of
    its tables has that column. A name that is a projection alias (``ORDER BY total``) is
    replaced by the projected expression.
    """
    from sqlglot import exp

    scope = [select.args.get("from_")] + list(select.args.get("joins") or [])
    tables = [t for part in scope if part is not None for t in [part.this] if isinstance(t, exp.Table)]
    names = {t.alias_or_name.lower(): t.name.lower() for t in tables}
    projected = {e.alias.lower(): e.this for e in select.expressions if isinstance(e, exp.Alias)}
    select.set("expressions", [e.this if isinstance(e, exp.Alias) else e for e in select.expressions])
    for t in tables:
        t.set("alias", None)
    for key in ("group", "order", "having"):
        node = select.args.get(key)
        for col in list(node.find_all(exp.Column)) if node is not None else []:
            if not col.table and col.name.lower() in projected:
                col.replace(projected[col.name.lower()].copy())
    for col in select.find_all(exp.Column):
        qualifier = col.table.lower()
        if qualifier:
            col.set("table", exp.to_identifier(names.get(qualifier, qualifier)))
            continue
        owners = sorted(set(names.values())) if len(set(names.values())) == 1 else [
            t for t in sorted(set(names.values())) if schema and col.name.lower() in schema.get(t, frozenset())
        ]
        if len(owners) == 1:
            col.set("table", exp.to_identifier(owners[0]))


def _canonical_condition(node) -> str:
    """A condition's text with the operands of every ``=`` / ``!=`` in sorted order (``a = b`` is ``b = a``)."""
    from sqlglot import exp

    node = node.copy()
    for eq in list(node.find_all(exp.EQ, exp.NEQ)):
        left, right = eq.this, eq.expression
        if left.sql() > right.sql():
            eq.set("this", right)
            eq.set("expression", left)
    return node.sql(dialect="sqlite")


def clause_items(sql: str, schema: dict[str, frozenset[str]] | None = None) -> dict[str, set[str]] | None:
    """The item set of each clause of ``sql`` (keys :data:`CLAUSES`), or None if it does not parse.

    select: the projected expressions (aliases dropped; ``DISTINCT`` is one more item);
    from: the table names of FROM and JOIN and each conjunct of the JOIN conditions;
    where / having: the conjuncts of the condition at its top-level ANDs; group_by: the
    expressions; order_by: ``<expression> ASC|DESC``; limit: the row count. Identifiers are
    lower-cased, columns are qualified by table name (:func:`_resolve_columns`) and equalities
    are order-free, so ``e.name`` under ``employees AS e`` equals ``name`` in a one-table query.
    A set operation (UNION, …) is one select item, its normalised text.
    """
    from sqlglot import exp

    tree = sqlglot_tree(sql)
    if tree is None:
        return None
    _bare_identifiers(tree)
    items: dict[str, set[str]] = {c: set() for c in CLAUSES}
    if not isinstance(tree, exp.Select):
        items["select"].add(tree.sql(dialect="sqlite"))
        return items
    _resolve_columns(tree, schema)
    items["select"] = {e.sql(dialect="sqlite") for e in tree.expressions} | ({"DISTINCT"} if tree.args.get("distinct") else set())
    scope = [tree.args.get("from_")] + list(tree.args.get("joins") or [])
    for part in (p for p in scope if p is not None):
        items["from"].add(part.this.sql(dialect="sqlite"))
        on = part.args.get("on")
        items["from"] |= {"ON " + _canonical_condition(c) for c in (_conjuncts(on) if on is not None else [])}
    for key, arg in (("where", "where"), ("having", "having")):
        node = tree.args.get(arg)
        items[key] = {_canonical_condition(c) for c in _conjuncts(node.this)} if node is not None else set()
    group = tree.args.get("group")
    items["group_by"] = {e.sql(dialect="sqlite") for e in group.expressions} if group is not None else set()
    order = tree.args.get("order")
    items["order_by"] = {
        f"{o.this.sql(dialect='sqlite')} {'DESC' if o.args.get('desc') else 'ASC'}" for o in order.expressions
    } if order is not None else set()
    limit = tree.args.get("limit")
    items["limit"] = {limit.expression.sql(dialect="sqlite")} if limit is not None else set()
    return items


def clause_f1(predicted: dict[str, set[str]], gold: dict[str, set[str]], clauses: Sequence[str] = DEFAULT_CLAUSES) -> float:
    """Mean over ``clauses`` that either query has of the clause's set F1 = 2|P∩G| / (|P|+|G|); 1.0 if none has any."""
    scores = [_f1(predicted[c], gold[c]) for c in clauses if predicted[c] or gold[c]]
    return sum(scores) / len(scores) if scores else 1.0


def _db_schema(path: Any) -> dict[str, frozenset[str]] | None:
    """``{table: its columns}`` (lower-cased) of the SQLite file at ``path``, or None without one."""
    if path is None or not Path(str(path)).is_file():
        return None
    import sqlite3
    import urllib.parse

    resolved = Path(str(path)).resolve()
    tables, _ = _schema_names(str(resolved), resolved.stat().st_mtime_ns)
    conn = sqlite3.connect(f"file:{urllib.parse.quote(str(resolved))}?mode=ro", uri=True)
    try:
        return {t: frozenset(r[0].lower() for r in conn.execute("SELECT name FROM pragma_table_info(?)", (t,))) for t in tables}
    finally:
        conn.close()


def _check_clauses(clauses: Sequence[str]) -> tuple[str, ...]:
    chosen = (clauses,) if isinstance(clauses, str) else tuple(clauses)
    unknown = [c for c in chosen if c not in CLAUSES]
    if unknown or not chosen:
        raise ValueError(f"reward 'sql_clause_f1': option 'clauses' {unknown or list(chosen)} must name some of {', '.join(CLAUSES)}")
    return chosen


@REWARDS.register("sql_clause_f1")
def sql_clause_f1(
    prompts: list[str],
    completions: list[str],
    answer: Sequence | None = None,
    db_path: Sequence | None = None,
    clauses: Sequence[str] = DEFAULT_CLAUSES,
    **kwargs: Any,
) -> list[float | None]:
    """Clause-level F1 of the completion's SQL against the gold SQL (``answer``), in [0, 1].

    Per clause of ``clauses`` (default SELECT, FROM/JOIN, WHERE, GROUP BY, ORDER BY; also
    ``having``, ``limit``): the F1 of the two item sets (:func:`clause_items`), e.g. SELECT
    {a, b} against {a, c} is 0.5; the reward is the mean over the clauses either query has
    (Sparks, arXiv 2505.00016; item sets [inferred]). A ``db_path`` column, when present,
    resolves unqualified columns of multi-table queries through the database's schema. 0.0
    without extractable or parseable SQL; None where the gold SQL is None or does not parse.
    """
    chosen = _check_clauses(clauses)
    answers = _require("sql_clause_f1", "answer", answer, len(completions))
    paths = db_path if db_path is not None else [None] * len(completions)
    schemas: dict[str, Any] = {}
    scores: list[float | None] = []
    for completion, gold, path in zip(completions, answers, paths):
        key = str(path)
        if key not in schemas:
            schemas[key] = _db_schema(path)
        gold_items = None if gold is None else clause_items(str(gold), schemas[key])
        if gold_items is None:
            scores.append(None)
            continue
        sql = extract_sql(completion)
        predicted = None if sql is None else clause_items(sql, schemas[key])
        scores.append(0.0 if predicted is None else clause_f1(predicted, gold_items, chosen))
    return scores


@REWARDS.register("sql_string_match")
def sql_string_match(
    prompts: list[str], completions: list[str], answer: Sequence | None = None, **kwargs: Any,
) -> list[float | None]:
    """1.0 if the completion's SQL equals the gold SQL (``answer``) once both are normalised by sqlglot, else 0.0.

    The string-match term of the Text2SQL reward (Sparks, arXiv 2505.00016; the normalisation is
    [inferred]): layout, case and quoting do not count, a reordered condition or another alias
    does. 0.0 without extractable or parseable SQL; None where the gold SQL is None or does not parse.
    """
    answers = _require("sql_string_match", "answer", answer, len(completions))
    scores: list[float | None] = []
    for completion, gold in zip(completions, answers):
        target = None if gold is None else normalised_sql(str(gold))
        if target is None:
            scores.append(None)
            continue
        sql = extract_sql(completion)
        scores.append(float(sql is not None and normalised_sql(sql) == target))
    return scores
