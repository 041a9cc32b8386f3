"""Clause-level chain-of-thought traces synthesised from gold SQL, for the SFT stage before GRPO.

Stage 1 of "Sparks of Tabular Reasoning via Text2SQL Reinforcement Learning" (Stoisser et al.,
arXiv 2505.00016): supervised fine-tuning on synthetic traces that walk through the gold query
clause by clause (which tables, how they are joined, which rows are kept, how they are grouped
and aggregated, how the result is ordered and cut), then the query itself; stage 2 is GRPO with
the execution reward. The authors generate their ~3.5k traces with an LLM from BIRD's gold SQL;
here the trace is written deterministically from the parsed query [inferred: no model is
available offline, and a template trace is exact by construction].

A trace is numbered steps, one per clause present, in the order a reader evaluates the query
(FROM, JOIN, WHERE, GROUP BY, aggregates, HAVING, ORDER BY, LIMIT, SELECT), then the query in a
```sql block, the format :func:`grpokit.rewards.sql.extract_sql` reads. The query of the block
is re-rendered from the parsed clauses, so a parse that lost a clause cannot pass the check
that it returns the gold rows (:func:`sql_cot`).

The parser covers one SELECT with FROM, [INNER] JOIN ... ON, WHERE, GROUP BY, HAVING, ORDER BY,
LIMIT; parentheses (subqueries, function calls) stay inside the clause that holds them. WITH,
set operations (UNION / INTERSECT / EXCEPT), outer or comma joins and OFFSET are refused with a
ValueError naming the construct.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from grpokit.data.demonstrations import DEMONSTRATIONS
from grpokit.rewards.sql import _tokens, extract_sql, has_top_level_order_by, results_match, run_sql_readonly

_CLAUSES = {  # keyword sequence at depth 0 -> clause name
    ("SELECT",): "select", ("FROM",): "from", ("INNER", "JOIN"): "join", ("JOIN",): "join",
    ("ON",): "on", ("WHERE",): "where", ("GROUP", "BY"): "group_by", ("HAVING",): "having",
    ("ORDER", "BY"): "order_by", ("LIMIT",): "limit",
}
_REFUSED = {"UNION", "INTERSECT", "EXCEPT", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "NATURAL", "OFFSET", "WITH"}
_AGGREGATE = re.compile(r"\b(COUNT|SUM|AVG|MIN|MAX|TOTAL|GROUP_CONCAT)\s*\(", re.IGNORECASE)


@dataclass
class Table:
    """One table of FROM / JOIN: its name, alias (None if unaliased) and JOIN condition (None for FROM)."""

    name: str
    alias: str | None = None
    on: str | None = None

    def sql(self) -> str:
        return self.name + (f" AS {self.alias}" if self.alias else "")


@dataclass
class SqlClauses:
    """The clauses of one SELECT: expressions as written, conditions split at top-level AND."""

    select: list[str]
    tables: list[Table]
    distinct: bool = False
    where: list[str] = field(default_factory=list)
    group_by: list[str] = field(default_factory=list)
    having: list[str] = field(default_factory=list)
    order_by: list[str] = field(default_factory=list)
    limit: str | None = None

    def sql(self) -> str:
        """The query these clauses spell, one space between clauses."""
        out = "SELECT " + ("DISTINCT " if self.distinct else "") + ", ".join(self.select)
        out += " FROM " + self.tables[0].sql()
        out += "".join(f" JOIN {t.sql()} ON {t.on}" for t in self.tables[1:])
        for word, items, sep in (("WHERE", self.where, " AND "), ("GROUP BY", self.group_by, ", "),
                                 ("HAVING", self.having, " AND "), ("ORDER BY", self.order_by, ", ")):
            if items:
                out += f" {word} " + sep.join(items)
        return out + (f" LIMIT {self.limit}" if self.limit else "")


def _segments(sql: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """Split ``sql`` at its depth-0 clause keywords: [(clause name, its tokens)], comments dropped."""
    tokens = _tokens(sql)
    if tokens is None:
        raise ValueError("unterminated quote or comment")
    tokens = [t for t in tokens if t[0] != "comment"]
    while tokens and (tokens[-1][0] == "space" or tokens[-1] == ("other", ";")):
        tokens.pop()
    out: list[tuple[str, list[tuple[str, str]]]] = []
    depth, i = 0, 0
    while i < len(tokens):
        kind, text = tokens[i]
        depth += (text == "(") - (text == ")") if kind == "other" else 0
        if depth == 0 and kind == "word":
            words = [t.upper() for k, t in tokens[i:i + 4] if k == "word"]
            if words[0] in _REFUSED:
                raise ValueError(f"'{text}' is not supported (one SELECT with inner JOINs only)")
            for keys, name in _CLAUSES.items():
                if tuple(words[:len(keys)]) == keys:
                    out.append((name, []))
                    while keys:  # skip the keyword's words and the spaces between them
                        keys = keys[1:] if tokens[i][0] == "word" else keys
                        i += 1
                    break
            else:
                if not out:
                    raise ValueError("the query does not start with SELECT")
                out[-1][1].append(tokens[i])
                i += 1
            continue
        if kind == "other" and text == ";":
            raise ValueError("more than one statement")
        if not out:
            raise ValueError("the query does not start with SELECT")
        out[-1][1].append(tokens[i])
        i += 1
    return out


def _text(tokens: list[tuple[str, str]]) -> str:
    return re.sub(r"\s+", " ", "".join(t for _, t in tokens)).strip()


def _split(tokens: list[tuple[str, str]], sep: str) -> list[str]:
    """Depth-0 pieces of ``tokens`` separated by ``sep`` (',' or the word AND; BETWEEN's AND stays)."""
    pieces, current, depth, between = [], [], 0, False
    for kind, text in tokens:
        if kind == "other":
            depth += (text == "(") - (text == ")")
        word = text.upper() if kind == "word" else None
        if depth == 0 and word == "BETWEEN":
            between = True
        is_sep = depth == 0 and ((sep == "," and text == "," and kind == "other") or (sep == "AND" and word == "AND"))
        if is_sep and sep == "AND" and between:
            between, is_sep = False, False
        if is_sep:
            pieces.append(_text(current))
            current = []
        else:
            current.append((kind, text))
    pieces.append(_text(current))
    if any(not p for p in pieces):
        raise ValueError(f"an empty item in a {'list' if sep == ',' else 'condition'}")
    return pieces


def _table(tokens: list[tuple[str, str]]) -> Table:
    words = _text(tokens).split()
    if any(t == "," for _, t in tokens) or "(" in _text(tokens):
        raise ValueError("comma joins and subqueries in FROM are not supported")
    if len(words) == 1:
        return Table(words[0])
    if len(words) == 3 and words[1].upper() == "AS":
        return Table(words[0], words[2])
    if len(words) == 2:
        return Table(words[0], words[1])
    raise ValueError(f"cannot read the table '{_text(tokens)}'")


def parse_sql(sql: str) -> SqlClauses:
    """The clauses of one SELECT query; ValueError naming what is not supported."""
    segments = _segments(sql)
    names = [n for n, _ in segments]
    if not names or names[0] != "select" or "from" not in names:
        raise ValueError("not a SELECT ... FROM query")
    order = ["select", "from", "join", "where", "group_by", "having", "order_by", "limit"]
    rank = [order.index("join" if n == "on" else n) for n in names]
    if rank != sorted(rank) or any(names.count(n) > 1 for n in order if n != "join"):
        raise ValueError("clauses out of order or repeated")
    select = segments[0][1]
    first = next((i for i, (k, _) in enumerate(select) if k != "space"), None)
    distinct = first is not None and select[first][0] == "word" and select[first][1].upper() == "DISTINCT"
    if distinct:
        select = select[first + 1:]
    clauses = SqlClauses(select=_split(select, ","), tables=[], distinct=distinct)
    for i, (name, tokens) in enumerate(segments[1:], start=1):
        if name == "from":
            clauses.tables.append(_table(tokens))
        elif name == "join":
            if i + 1 >= len(segments) or segments[i + 1][0] != "on":
                raise ValueError("a JOIN without ON")
            clauses.tables.append(_table(tokens))
        elif name == "on":
            if segments[i - 1][0] != "join":
                raise ValueError("ON without a JOIN")
            clauses.tables[-1].on = _text(tokens)
        elif name == "limit":
            clauses.limit = _text(tokens)
            if not clauses.limit.isdigit():
                raise ValueError(f"LIMIT '{clauses.limit}' is not a row count")
        else:
            setattr(clauses, name, _split(tokens, "AND" if name in ("where", "having") else ","))
    return clauses


def _alias_names(clauses: SqlClauses) -> str:
    parts = [t.name + (f" (as {t.alias})" if t.alias else "") for t in clauses.tables]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def cot_trace(sql: str) -> str:
    """The clause-by-clause reasoning for ``sql``, then the query in a ```sql block.

    Steps (each only when its clause is present): Tables, Join (one per JOIN), Filter (one
    condition per AND term), Group, Aggregate (the aggregate calls of SELECT), Group filter
    (HAVING), Order, Limit, Select; e.g. for ``SELECT COUNT(*) FROM employees AS e JOIN
    departments AS d ON e.department_id = d.id WHERE d.name = 'Sales'``::

        1. Tables: employees (as e) and departments (as d).
        2. Join: departments to employees on e.department_id = d.id.
        3. Filter: keep the rows where d.name = 'Sales'.
        4. Aggregate: COUNT(*) over the kept rows.
        5. Select: COUNT(*).
    """
    c = parse_sql(sql)
    steps = [f"Tables: {_alias_names(c)}."]
    for prev, t in zip(c.tables, c.tables[1:]):
        steps.append(f"Join: {t.name} to {prev.name} on {t.on}.")
    if c.where:
        steps.append("Filter: keep the rows where " + " and ".join(c.where) + ".")
    if c.group_by:
        steps.append("Group: by " + ", ".join(c.group_by) + ".")
    aggregates = [s for s in c.select if _AGGREGATE.search(s)]
    if aggregates:
        scope = "for each group" if c.group_by else "over the kept rows" if c.where else "over all rows"
        steps.append("Aggregate: " + ", ".join(aggregates) + f" {scope}.")
    if c.having:
        steps.append("Group filter: keep the groups where " + " and ".join(c.having) + ".")
    for item in c.order_by:
        words = item.split()
        direction = {"DESC": "descending", "ASC": "ascending"}.get(words[-1].upper())
        expr = " ".join(words[:-1]) if direction else item
        steps.append(f"Order: by {expr}, {direction or 'ascending'}.")
    if c.limit:
        steps.append(f"Limit: the first {c.limit} row{'s' if c.limit != '1' else ''}.")
    steps.append("Select: " + ("distinct " if c.distinct else "") + ", ".join(c.select) + ".")
    body = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, start=1))
    return f"{body}\n```sql\n{c.sql()}\n```"


@DEMONSTRATIONS.register("sql_cot")
def sql_cot(row: dict) -> str:
    """The CoT completion of a text-to-SQL row: :func:`cot_trace` of its gold SQL (column ``answer``).

    When the row names its database (``db_path``), the trace's query must return the gold
    query's rows there (as ``sql_execution`` compares them), else ValueError.
    """
    gold = row.get("answer")
    if not isinstance(gold, str) or not gold.strip():
        raise ValueError("its 'answer' column holds no gold SQL")
    try:
        trace = cot_trace(gold)
    except ValueError as exc:
        raise ValueError(f"its answer {gold[:60]!r} is not a gold SQL query this writer reads ({exc})") from None
    if row.get("db_path"):
        if not Path(row["db_path"]).is_file():
            raise ValueError(f"its db_path {row['db_path']} is not a file")
        gold_rows, error = run_sql_readonly(row["db_path"], gold)
        if error is not None:
            raise ValueError(f"its gold SQL fails on {row['db_path']}: {error}")
        rendered = extract_sql(trace)  # what sql_execution will read from the completion
        rows, error = run_sql_readonly(row["db_path"], rendered)
        if error is not None or not results_match(rows, gold_rows, has_top_level_order_by(gold)):
            raise ValueError(f"the trace's query {rendered[:60]!r} does not return the gold rows ({error or 'other rows'})")
    return trace
