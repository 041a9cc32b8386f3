"""Compositional question templates of the ``text_to_sql`` task: joins, grouping, HAVING, ranking.

The ``compositional`` pool of :func:`grpokit.data.sql_task.text_to_sql` (option ``templates``).
Each template composes several clauses, as the BIRD queries that "Sparks of Tabular Reasoning
via Text2SQL Reinforcement Learning" (Stoisser et al., arXiv 2505.00016) trains on do: a
three-table JOIN (orders -> employees -> departments), a WHERE before a GROUP BY, a HAVING over
an aggregate, an ORDER BY over an aggregate with LIMIT, COUNT(DISTINCT ...). The template set
itself is [inferred] (the paper's stage-1 traces come from BIRD's gold SQL).

Parameters are drawn from the database's rows (the tuples of
:func:`grpokit.data.sql_task._db_rows`: departments ``(id, name, city, budget)``, employees
``(id, name, department_id, title, salary, hire_year)``, orders ``(id, employee_id, customer,
amount, order_year, status)``), so every gold query returns rows; a ranking question whose
LIMIT boundary falls on a tie is not well posed (two correct answers) and is refused (None).
"""

from __future__ import annotations

import random
from collections import defaultdict

JOIN_DEP = "FROM employees AS e JOIN departments AS d ON e.department_id = d.id"
JOIN_ORD = "FROM orders AS o JOIN employees AS e ON o.employee_id = e.id"
JOIN_ORD_DEP = f"{JOIN_ORD} JOIN departments AS d ON e.department_id = d.id"
AGGREGATES = {"average": "AVG", "highest": "MAX", "lowest": "MIN", "total": "SUM"}
STATUSES = ("shipped", "pending", "cancelled")

COMPOSITIONAL_KINDS = (
    "department_order_total", "orders_per_department", "departments_over_headcount",
    "top_customers", "top_sellers", "city_salary", "customers_total_above",
    "distinct_customers_of_employee", "department_average_order", "rich_department_earners",
)

Row = tuple
Db = dict[str, list[Row]]


def _untied(values: list[float], n: int) -> bool:
    """True if the ``n`` largest of ``values`` are distinct and strictly above the rest."""
    top = sorted(values, reverse=True)[: n + 1]
    return len(top) >= n and len(set(top)) == len(top)


def _ranked_n(rng: random.Random, values: list[float], lo: int, hi: int) -> int | None:
    """A LIMIT in ``[lo, hi]`` whose top rows of ``values`` are tie-free, or None."""
    fits = [n for n in range(lo, min(hi, len(values)) + 1) if _untied(values, n)]
    return rng.choice(fits) if fits else None


def _totals(db: Db, key, status: str | None = None, agg=sum) -> dict:
    """``agg`` of order amounts grouped by ``key(order, employee, department)``, optionally one status."""
    groups: dict = defaultdict(list)
    for o in db["orders"]:
        if status is None or o[5] == status:
            e = db["employees"][o[1] - 1]
            groups[key(o, e, db["departments"][e[2] - 1])].append(o[3])
    return {k: agg(v) for k, v in groups.items()}


def compositional_question(
    kind: str, rng: random.Random, db: Db, dep: Row, emp: Row, order: Row, seller: Row
) -> tuple[str, str, str] | None:
    """One (template name, question, gold SQL) of ``kind``; None if it has no well-posed instance.

    ``dep``, ``emp``, ``order`` are rows drawn from ``db``; ``seller`` is the employee who
    handled ``order`` (so filters on it select at least one order).
    """
    status = order[5]
    if kind == "department_order_total":
        d = db["departments"][seller[2] - 1]  # seller's department: at least ``order`` matches
        return kind, (f"What is the total amount of the {status} orders handled by employees of the "
                      f"{d[1]} department?"), (
            f"SELECT SUM(o.amount) {JOIN_ORD_DEP} WHERE d.name = '{d[1]}' AND o.status = '{status}'")
    if kind == "orders_per_department":
        return kind, (f"How many {status} orders did the employees of each department handle? "
                      "Give the department name and the number of orders."), (
            f"SELECT d.name, COUNT(*) {JOIN_ORD_DEP} WHERE o.status = '{status}' GROUP BY d.name")
    if kind == "departments_over_headcount":
        heads = defaultdict(int)
        for e in db["employees"]:
            heads[e[2]] += 1
        n = rng.randrange(0, max(heads.values()))  # below the largest head count: at least one group
        return kind, (f"Which departments have more than {n} employees? Give the department name "
                      "and the number of employees."), (
            f"SELECT d.name, COUNT(*) {JOIN_DEP} GROUP BY d.name HAVING COUNT(*) > {n}")
    if kind == "top_customers":
        n = _ranked_n(rng, list(_totals(db, lambda o, e, d: o[2]).values()), 2, 5)
        return None if n is None else (kind, (
            f"Which {n} customers have the largest total order amount? Give the customer and the "
            "total, largest first."), (
            f"SELECT customer, SUM(amount) FROM orders GROUP BY customer ORDER BY SUM(amount) DESC LIMIT {n}"))
    if kind == "top_sellers":
        n = _ranked_n(rng, list(_totals(db, lambda o, e, d: e[1], status).values()), 2, 5)
        return None if n is None else (kind, (
            f"Which {n} employees handled the largest total amount of {status} orders? Give their "
            "names and totals, largest first."), (
            f"SELECT e.name, SUM(o.amount) {JOIN_ORD} WHERE o.status = '{status}' GROUP BY e.name "
            f"ORDER BY SUM(o.amount) DESC LIMIT {n}"))
    if kind == "city_salary":
        word = rng.choice(sorted(AGGREGATES))
        return kind, (f"What is the {word} salary of the employees in each city? Give the city and "
                      "the value."), (
            f"SELECT d.city, {AGGREGATES[word]}(e.salary) {JOIN_DEP} GROUP BY d.city")
    if kind == "customers_total_above":
        best = max(_totals(db, lambda o, e, d: o[2], status).values())
        cut = rng.randrange(500, max(best, 600), 500)  # below the largest total: at least one group
        return kind, (f"Which customers have {status} orders totalling more than {cut}? Give the "
                      "customer and the total."), (
            f"SELECT customer, SUM(amount) FROM orders WHERE status = '{status}' GROUP BY customer "
            f"HAVING SUM(amount) > {cut}")
    if kind == "distinct_customers_of_employee":
        return kind, f"For how many different customers did {seller[1]} handle orders?", (
            f"SELECT COUNT(DISTINCT o.customer) {JOIN_ORD} WHERE e.name = '{seller[1]}'")
    if kind == "department_average_order":
        high = rng.random() < 0.5
        word, direction = ("highest", "DESC") if high else ("lowest", "ASC")
        means = _totals(db, lambda o, e, d: d[1], status, agg=lambda v: sum(v) / len(v))
        values = [v if high else -v for v in means.values()]
        if not _untied([round(v, 6) for v in values], 1):
            return None
        return kind, (f"Which department's employees have the {word} average amount of {status} "
                      "orders? Give the department name and the average."), (
            f"SELECT d.name, AVG(o.amount) {JOIN_ORD_DEP} WHERE o.status = '{status}' GROUP BY d.name "
            f"ORDER BY AVG(o.amount) {direction} LIMIT 1")
    if kind == "rich_department_earners":
        d = db["departments"][emp[2] - 1]
        budget = rng.randrange(0, d[3], 50_000)  # below emp's department budget and salary: emp counts
        salary = rng.randrange(30_000, emp[4], 5_000)  # salaries start at 40_000
        return kind, (f"How many employees earn more than {salary} and work in a department with a "
                      f"budget above {budget}?"), (
            f"SELECT COUNT(*) {JOIN_DEP} WHERE e.salary > {salary} AND d.budget > {budget}")
    raise ValueError(f"unknown compositional template {kind!r}")
