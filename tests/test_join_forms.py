"""Join forms beyond §25's (docs/theory.md §30): a chain's keys the policy does not list, joins
written inside CTEs and FROM-subqueries, a public table joined twice under two aliases. Each is
read into §25's tree: the answers are the SQL's within the bounds, a hostile customer moves each
aggregate by at most its sensitivity, and a join that could multiply a unit's rows is refused in
one line."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from dpsql.engine import QueryRefused
from dpsql.engine.backends.duckdb_execute import open_data, run
from dpsql.engine.policy import Policy
from dpsql.engine.policy_yaml import parse_policy
from dpsql.engine.rewrite import rewrite
from dpsql.engine.sensitivity import sensitivity

from tests.support import bound_plans
from tests.test_join_tree import HOSTILE, PARSED, base_units, make_db, plan_of, unlisted_policy

UNLISTED = parse_policy(unlisted_policy())
IN_CTE = ("WITH x AS (SELECT l_price, o_year, l_suppkey FROM lineitem JOIN orders ON l_orderkey = "
          "o_orderkey WHERE l_quantity > 2) SELECT n_name, SUM(l_price), COUNT(*) FROM x JOIN supplier "
          "ON x.l_suppkey = s_suppkey JOIN nation ON s_nationkey = n_nationkey GROUP BY n_name")
IN_SUBQUERY = ("SELECT o_year, SUM(l_price), COUNT(*) FROM (SELECT l_price, o_year, o_custkey FROM "
               "lineitem, orders WHERE l_orderkey = o_orderkey) AS t JOIN customer ON t.o_custkey = "
               "c_custkey WHERE c_acctbal > 5 GROUP BY o_year")
TWO_NATIONS = ("SELECT n1.n_name AS supp_nation, n2.n_name AS cust_nation, SUM(l_price) AS revenue, "
               "COUNT(*) FROM lineitem, orders, customer, supplier, nation n1, nation n2 WHERE "
               "s_suppkey = l_suppkey AND o_orderkey = l_orderkey AND c_custkey = o_custkey AND "
               "s_nationkey = n1.n_nationkey AND c_nationkey = n2.n_nationkey AND ((n1.n_name = "
               "'FRANCE' AND n2.n_name = 'JAPAN') OR (n1.n_name = 'JAPAN' AND n2.n_name = 'FRANCE')) "
               "GROUP BY n1.n_name, n2.n_name")
REGION_TWICE = ("SELECT r1.r_name, SUM(l_price), COUNT(*) FROM lineitem "
                "JOIN supplier ON l_suppkey = s_suppkey "
                "JOIN nation AS n1 ON s_nationkey = n1.n_nationkey "
                "JOIN region AS r1 ON n1.n_regionkey = r1.r_regionkey "
                "JOIN orders ON l_orderkey = o_orderkey JOIN customer ON o_custkey = c_custkey "
                "JOIN nation AS n2 ON c_nationkey = n2.n_nationkey "
                "JOIN region AS r2 ON n2.n_regionkey = r2.r_regionkey "
                "WHERE r2.r_name = 'ASIA' GROUP BY r1.r_name")
FORMS = [(IN_CTE, PARSED), (IN_SUBQUERY, PARSED), (TWO_NATIONS, PARSED), (REGION_TWICE, PARSED),
         (IN_CTE, UNLISTED), (TWO_NATIONS, UNLISTED)]


def exact(db: Path, sql: str, policy: Policy = PARSED) -> tuple[list[tuple], dict[str, list]]:
    """The exact group keys and measurements of `sql` on the bounded copies."""
    plan = plan_of(sql, policy)
    conn = open_data(db, policy)
    try:
        bound_plans(conn, [plan])
        answer = run(conn, rewrite(plan).sql("duckdb"), len(plan.group_by))
    finally:
        conn.close()
    return answer.keys, answer.values


@pytest.mark.parametrize("sql, policy", FORMS)
def test_each_form_is_a_tree_bounded_by_the_lines_bound(sql, policy):
    plan = plan_of(sql, policy)
    assert plan.join is not None and plan.join.root.name == "lineitem" and plan.rows_per_unit == 5
    assert all(edge.fanout == 1 for edge in plan.join.edges)


@pytest.mark.parametrize("sql, policy", FORMS)
def test_each_form_gives_the_exact_sql_answer_within_the_bounds(tmp_path, sql, policy):
    """No unit is over its bounds: every group's measurements are the SQL answer's (a group the
    data lacks is 0)."""
    db = make_db(tmp_path / "d.duckdb", base_units())
    keys, values = exact(db, sql, policy)
    n = len(plan_of(sql, policy).group_by)
    with duckdb.connect(str(db), read_only=True) as raw:
        truth = {tuple(row[:n]): row[n:] for row in raw.execute(sql).fetchall()}
    assert truth
    for j, key in enumerate(keys):
        expected = truth.get(tuple(key), (0, 0))
        assert [values["__m0"][j], values["__m1"][j]] == pytest.approx([float(v) for v in expected])


@pytest.mark.parametrize("before, after", [("many orders with many lines", "nothing"),
                                           ("one order with every line", "many orders with many lines")])
@pytest.mark.parametrize("sql, policy", FORMS)
def test_a_hostile_customer_moves_each_form_within_its_sensitivity(tmp_path, sql, policy, before, after):
    strays = [(None, 1, 1, 10.0, 1), (123_456, 2, 3, 10.0, 2)]
    units = base_units(12)
    a = make_db(tmp_path / "a.duckdb", {**units, 77: HOSTILE[before]}, strays)
    b = make_db(tmp_path / "b.duckdb", {**units, 77: HOSTILE[after]}, strays)
    plan = plan_of(sql, policy)
    first, second = exact(a, sql, policy)[1], exact(b, sql, policy)[1]
    for m in plan.measurements:
        moved = sum(abs(float(x or 0) - float(y or 0)) for cell in m.cells
                    for x, y in zip(first[cell], second[cell], strict=True))
        assert moved <= sensitivity(m, plan) * (1 + 1e-9), (sql, m.label, moved)


@pytest.mark.parametrize("sql, fragment", [
    # A private table twice would pair a unit's rows with each other: m² rows.
    ("SELECT COUNT(*) FROM lineitem JOIN orders o1 ON l_orderkey = o1.o_orderkey JOIN orders o2 ON "
     "l_orderkey = o2.o_orderkey", "JOIN refused: orders is joined twice; only a public table may be "
                                   "joined more than once"),
    ("WITH x AS (SELECT a.l_price FROM lineitem a JOIN lineitem b ON a.l_orderkey = b.l_orderkey) "
     "SELECT SUM(l_price) FROM x", "JOIN refused: lineitem joined to itself"),
    # The second nation joined on a column that is not its key: each row would meet many.
    ("SELECT COUNT(*) FROM lineitem JOIN supplier ON l_suppkey = s_suppkey JOIN nation n1 ON "
     "s_nationkey = n1.n_nationkey JOIN nation n2 ON n1.n_regionkey = n2.n_regionkey",
     "JOIN refused: nation.n_regionkey is not the table's declared unique key"),
    ("SELECT COUNT(*) FROM lineitem JOIN supplier ON l_suppkey = s_suppkey JOIN nation ON "
     "s_nationkey = nation.n_nationkey JOIN nation n2 ON nation.n_regionkey = n2.n_nationkey",
     "JOIN refused: nation is joined more than once; give each its own alias"),
    ("SELECT n_name, COUNT(*) FROM lineitem JOIN supplier ON l_suppkey = s_suppkey JOIN nation n1 ON "
     "s_nationkey = n1.n_nationkey JOIN nation n2 ON n1.n_nationkey = n2.n_nationkey GROUP BY n_name",
     "column n_name is in both n1 and n2: write n1.n_name or n2.n_name"),
    # Inside a CTE, a chain's key joined off the chain (two private tables on a non-key column).
    ("WITH x AS (SELECT l_price FROM lineitem JOIN orders ON l_partkey = o_orderkey) SELECT "
     "SUM(l_price) FROM x", "JOIN refused: lineitem joins orders along its chain only"),
])
def test_joins_that_could_multiply_a_units_rows_are_refused_in_one_line(sql, fragment):
    with pytest.raises(QueryRefused) as info:
        plan_of(sql)
    assert fragment in str(info.value) and "\n" not in str(info.value)


# JOIN ... USING, the unit under two names, a public table first (docs/theory.md §30.6-§30.8).
USING_SQL = ("SELECT o_year, COUNT(*), SUM(l_price) FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
             "JOIN part USING (p_partkey) GROUP BY o_year")
PUBLIC_FIRST = ("SELECT n_name, SUM(l_price), COUNT(*) FROM nation JOIN supplier ON n_nationkey = "
                "s_nationkey JOIN lineitem ON s_suppkey = l_suppkey GROUP BY n_name")
PUBLIC_FIRST_COMMAS = ("SELECT p_promo, SUM(l_price), COUNT(*) FROM part, lineitem, orders WHERE "
                       "p_partkey = l_partkey AND l_orderkey = o_orderkey GROUP BY p_promo")


def test_using_is_the_on_it_stands_for():
    """USING (c) compares c of the one earlier table holding it with the joined table's."""
    sql = USING_SQL.replace("JOIN part USING (p_partkey)", "JOIN part ON l_partkey = p_partkey")
    using = USING_SQL.replace("USING (p_partkey)", "USING (l_partkey)")
    with pytest.raises(QueryRefused, match=r"USING \(l_partkey\): part has no column l_partkey"):
        plan_of(using)
    with pytest.raises(QueryRefused, match=r"USING \(p_partkey\) joins part to no table before it"):
        plan_of(USING_SQL)
    assert plan_of(sql).rows_per_unit == 5


def test_a_public_table_first_is_the_same_tree_as_the_private_table_first():
    first = plan_of(PUBLIC_FIRST)
    written = plan_of("SELECT n_name, SUM(l_price), COUNT(*) FROM lineitem JOIN supplier ON "
                      "s_suppkey = l_suppkey JOIN nation ON n_nationkey = s_nationkey GROUP BY n_name")
    assert first.table.name == "lineitem" and first.rows_per_unit == written.rows_per_unit == 5
    assert {(e.parent, e.child) for e in first.join.edges} == {(e.parent, e.child) for e in written.join.edges}
    with pytest.raises(QueryRefused, match="table part is public and written first beside a join other"):
        plan_of("SELECT COUNT(*) FROM part LEFT JOIN lineitem ON p_partkey = l_partkey")


@pytest.mark.parametrize("sql", [PUBLIC_FIRST, PUBLIC_FIRST_COMMAS])
def test_a_public_table_first_gives_the_exact_sql_answer_and_keeps_its_sensitivity(tmp_path, sql):
    db = make_db(tmp_path / "d.duckdb", base_units())
    keys, values = exact(db, sql, PARSED)
    n = len(plan_of(sql).group_by)
    with duckdb.connect(str(db), read_only=True) as raw:
        truth = {tuple(row[:n]): row[n:] for row in raw.execute(sql).fetchall()}
    for j, key in enumerate(keys):
        expected = truth.get(tuple(key), (0, 0))
        assert [values["__m0"][j], values["__m1"][j]] == pytest.approx([float(v) for v in expected])
    units = base_units(12)
    a = make_db(tmp_path / "a.duckdb", {**units, 77: HOSTILE["many orders with many lines"]})
    b = make_db(tmp_path / "b.duckdb", {**units, 77: HOSTILE["nothing"]})
    plan = plan_of(sql)
    first, second = exact(a, sql, PARSED)[1], exact(b, sql, PARSED)[1]
    for m in plan.measurements:
        moved = sum(abs(float(x or 0) - float(y or 0)) for cell in m.cells
                    for x, y in zip(first[cell], second[cell], strict=True))
        assert moved <= sensitivity(m, plan) * (1 + 1e-9), (sql, m.label, moved)


TWO_NAMES = parse_policy({
    "budget": {"epsilon": 100.0}, "dependence": {"k": 1, "eta": 0.0},
    "tables": {
        "actors": {"privacy_unit": "id", "max_rows_per_unit": 1,
                   "columns": {"born": {"type": "int", "lower": 1900, "upper": 2020}}},
        "roles": {"privacy_unit": {"through": "actor_id", "references": "actors.id"},
                  "max_rows_per_unit": 4, "columns": {"fee": {"type": "float", "lower": 0, "upper": 10}}},
    }})


def test_the_unit_under_two_names_is_a_one_link_chain(tmp_path):
    """`actors.id = roles.actor_id`: roles reach the unit through actor_id (a chain of one link),
    so the join is an edge of the chain with fanout m_roles and its answers are the SQL's."""
    sqls = ["SELECT COUNT(*), SUM(fee) FROM actors JOIN roles ON actors.id = roles.actor_id",
            "SELECT COUNT(*), SUM(fee) FROM roles, actors WHERE actor_id = id AND born > 1950",
            "SELECT COUNT(*), SUM(fee) FROM actors JOIN roles ON actors.id = roles.actor_id JOIN "
            "roles AS r2 ON actors.id = r2.actor_id"]
    for sql in sqls[:2]:
        assert plan_of(sql, TWO_NAMES).rows_per_unit == 4
    with pytest.raises(QueryRefused, match="roles is joined twice"):
        plan_of(sqls[2], TWO_NAMES)
    db = tmp_path / "films.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE TABLE actors AS SELECT i AS id, 1900 + i * 3 AS born FROM range(30) t(i)")
        conn.execute("CREATE TABLE roles AS SELECT i % 30 AS actor_id, (i % 10) * 1.0 AS fee "
                     "FROM range(100) t(i)")
        conn.execute("INSERT INTO roles VALUES (NULL, 5.0), (99, 6.0)")
    for sql in sqls[:2]:
        values = exact(db, sql, TWO_NAMES)[1]
        with duckdb.connect(str(db), read_only=True) as raw:
            truth = raw.execute(sql).fetchone()
        assert [values["__m0"][0], values["__m1"][0]] == pytest.approx([float(v) for v in truth])
