"""Parse SQL text with sqlglot into exactly one SELECT, refusing other statement shapes."""

from __future__ import annotations

import difflib
import logging
import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from ..errors import QueryRefused

_DUCKDB = Dialect.get_or_raise("duckdb")
_QUERY_STARTS = {"SELECT", "WITH", "FROM", "(", "VALUES", "TABLE"}

logging.getLogger("sqlglot").setLevel(logging.ERROR)

MAX_SQL_LENGTH = 20_000
MAX_DEPTH = 100  # deeper expressions are refused before any recursive step can overflow the stack
MAX_CTES = 100  # a longer WITH clause is refused before the CTEs are resolved into one another

# Statement and clause shapes that are refused outright, with a name and an alternative.
_REFUSED_NODES: dict[type, str] = {
    exp.Union: "UNION (run each SELECT as its own query)",
    exp.Intersect: "INTERSECT (run each SELECT as its own query)",
    exp.Except: "EXCEPT (run each SELECT as its own query)",
    exp.Window: "window function (use GROUP BY on a public column)",
    exp.Lateral: "LATERAL (queries read one private table)",
    exp.Pivot: "PIVOT (use GROUP BY on a public column)",
    exp.Qualify: "QUALIFY (use HAVING on the aggregate)",
    exp.Into: "SELECT INTO (queries only read)",
    exp.Lock: "locking clause (queries only read)",
    exp.Placeholder: "parameter placeholder (write the value as a literal)",
    exp.Parameter: "parameter (write the value as a literal)",
}


def parse_select(sql: str) -> exp.Select:
    """Return the single SELECT statement in `sql`, or raise QueryRefused naming what is wrong."""
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRefused("empty query: expected one SELECT statement")
    if len(sql) > MAX_SQL_LENGTH:
        raise QueryRefused(f"query is {len(sql)} characters long; at most {MAX_SQL_LENGTH} accepted")
    if "\x00" in sql:
        raise QueryRefused("query contains a NUL character")
    sql, top = _without_top(sql)
    try:
        statements = [s for s in sqlglot.parse(sql, dialect="duckdb") if s is not None]
    except ParseError as exc:
        keyword = _first_keyword(sql)
        if keyword not in _QUERY_STARTS:
            raise QueryRefused(_not_a_query(sql, keyword)) from None
        raise QueryRefused(f"could not parse the SQL: {_parse_detail(exc)}") from None
    except TokenError as exc:
        raise QueryRefused(f"could not read the SQL: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise QueryRefused("query is nested too deeply to parse") from None
    if not statements:
        raise QueryRefused("empty query: expected one SELECT statement")
    if len(statements) > 1:
        raise QueryRefused(
            f"{len(statements)} statements given; send one SELECT statement per query"
        )
    statement = statements[0]
    if top is not None and isinstance(statement, exp.Select):
        if statement.args.get("limit") is not None:
            raise QueryRefused("TOP and LIMIT both given: write one of them")
        statement.set("limit", exp.Limit(expression=top))
    if not isinstance(statement, exp.Select):
        if _first_is_word(sql):
            raise QueryRefused(_not_a_query(sql, _first_keyword(sql)))
        raise QueryRefused(f"{_statement_name(statement, sql)} statement refused: "
                           "only SELECT is supported")
    check_depth(statement)
    _check_ctes(statement)
    if statement.args.get("with_") is not None and statement.args["with_"].args.get("recursive"):
        raise QueryRefused("WITH RECURSIVE refused (a CTE may only filter, rename and compute "
                           "columns of one table)")
    for node in statement.walk():
        # Comments are dropped so that no analyst text is ever emitted into executed SQL.
        node.comments = None
        if isinstance(node, exp.Select) and node is not statement and not _flattenable(node):
            if isinstance(_outside_subquery(node), exp.Join):
                raise QueryRefused(
                    "JOIN to a subquery refused: join a table by its name (FROM <private table> "
                    "[LEFT] JOIN <public or parent table> ON <private>.<column> = <table>.<key>, "
                    "or another private table on the privacy unit) and filter it in WHERE")
            raise QueryRefused("subquery refused (outside FROM and WITH; filter on the table's "
                               "columns directly)")
        if isinstance(node, exp.Join) and node.parent is not statement \
                and not (isinstance(node.parent, exp.Select) and _flattenable(node.parent)):
            raise QueryRefused("JOIN refused here (only the outer query may join: FROM <private "
                               "table> [LEFT] JOIN <public table> ON <private>.<column> = <public>.<key>)")
        if isinstance(node, exp.With) and node is not statement.args.get("with_"):
            raise QueryRefused("WITH refused here (declare every CTE in the top-level WITH)")
        for node_type, name in _REFUSED_NODES.items():
            if isinstance(node, node_type):
                raise QueryRefused(f"{name.split(' (')[0]} refused" + _alternative(name))
    return statement


def _without_top(sql: str) -> tuple[str, exp.Literal | None]:
    """T-SQL's `SELECT TOP n ...` (or `TOP (n)`) as the query without it and n, which the
    caller sets as the LIMIT it means; `TOP n PERCENT` and `WITH TIES` are refused as LIMIT's are."""
    try:
        tokens = _DUCKDB.tokenize(sql)
    except TokenError:
        return sql, None
    if len(tokens) < 3 or tokens[0].token_type != TokenType.SELECT or tokens[1].text.upper() != "TOP":
        return sql, None
    paren = tokens[2].token_type == TokenType.L_PAREN
    number = tokens[3 if paren else 2] if len(tokens) > 3 else tokens[2]
    last = 4 if paren else 2
    if number.token_type != TokenType.NUMBER or (
            paren and (len(tokens) <= 4 or tokens[4].token_type != TokenType.R_PAREN)):
        return sql, None  # a column named top, or no T-SQL TOP: parsed as written
    after = tokens[last + 1].text.upper() if len(tokens) > last + 1 else ""
    if after in ("PERCENT", "WITH"):
        raise QueryRefused(f"TOP n {after}{' TIES' if after == 'WITH' else ''} refused: not "
                           "supported; write TOP n or LIMIT n with a whole number of rows")
    rest = sql[:tokens[1].start] + " " * (tokens[last].end + 1 - tokens[1].start) + \
        sql[tokens[last].end + 1:]
    return rest, exp.Literal(this=number.text, is_string=False)


def _flattenable(select: exp.Select) -> bool:
    """Whether a nested SELECT is a CTE body or a FROM-subquery, the forms engine/sql/flatten.py
    merges into the outer query (or refuses with the construct's name)."""
    return isinstance(_outside_subquery(select), (exp.CTE, exp.From))


def _outside_subquery(select: exp.Select) -> exp.Expr | None:
    """What holds a nested SELECT, past its parentheses (FROM, a CTE, a JOIN, an IN, ...)."""
    parent = select.parent
    while isinstance(parent, exp.Subquery):
        parent = parent.parent
    return parent


# The clauses sqlglot names when one is left without what it needs, and what that is.
_INCOMPLETE = {"Where": "WHERE needs a condition, e.g. WHERE age > 30",
               "Having": "HAVING needs a condition, e.g. HAVING COUNT(*) > 10",
               "Group": "GROUP BY needs a column, e.g. GROUP BY state",
               "Order": "ORDER BY needs a column, e.g. ORDER BY state",
               "Join": "JOIN needs a table and ON <private>.<column> = <table>.<key>",
               "Limit": "LIMIT needs a number, e.g. LIMIT 10"}


def _not_a_query(sql: str, keyword: str) -> str:
    """A statement that is not a query: by its name (DROP, ATTACH, ...), or, when its first word
    is no SQL keyword but close to SELECT or WITH (SELEC), as the misspelling it is."""
    close = difflib.get_close_matches(keyword, ["SELECT", "WITH"], n=1, cutoff=0.6)
    if not close or not _first_is_word(sql):
        return f"{keyword} statement refused: only SELECT is supported"
    written = _DUCKDB.tokenize(sql)[0].text[:40]
    return (f"could not parse the SQL: it starts with {written!r}, which begins no SQL statement; "
            f"did you mean {close[0]}? A query is one SELECT statement (or WITH ... SELECT)")


def _first_is_word(sql: str) -> bool:
    """Whether the first token is a plain word, not an SQL keyword (SELEC, not DROP)."""
    try:
        tokens = _DUCKDB.tokenize(sql)
    except TokenError:
        return False
    return bool(tokens) and tokens[0].token_type == TokenType.VAR


def check_depth(statement: exp.Expression, where: str = "") -> None:
    """Refuse expressions nested deeper than MAX_DEPTH (measured without recursion); `where`
    says which form of the query was measured when it is not the analyst's text."""
    stack = [(statement, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise QueryRefused(f"query is nested more than {MAX_DEPTH} levels deep{where}; "
                               "flatten it (e.g. IN (...) instead of a chain of OR)")
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _check_ctes(statement: exp.Select) -> None:
    """Refuse a WITH clause of more than MAX_CTES CTEs: resolving a chain of them into one
    SELECT recurses once per CTE."""
    with_ = statement.args.get("with_")
    count = 0 if with_ is None else len(with_.expressions)
    if count > MAX_CTES:
        raise QueryRefused(f"query declares {count} CTEs; at most {MAX_CTES} are accepted in one WITH "
                           "clause (merge CTEs that only rename or filter)")


def _parse_detail(exc: ParseError) -> str:
    """The first parse error as 'description at line L, column C', without token internals."""
    if not exc.errors:
        return str(exc).splitlines()[0]
    first = exc.errors[0]
    description = str(first.get("description", "syntax error"))
    missing = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*\.(\w+)'>", description)
    if missing is not None:
        clause = _INCOMPLETE.get(missing.group(1), f"{missing.group(1).upper()} is incomplete")
        return f"{clause} (at line {first.get('line')}, column {first.get('col')})"
    if " <Token" in description:
        description = f"{description.split(' <Token')[0]} {first.get('highlight', '')!r}"
    description = description.rstrip(".")
    return f"{description} at line {first.get('line')}, column {first.get('col')}"


def _alternative(name: str) -> str:
    return f" ({name.split(' (', 1)[1]}" if " (" in name else ""


def _statement_name(statement: exp.Expr, sql: str) -> str:
    """A readable name for a non-SELECT statement (DROP, COPY, PRAGMA, ATTACH, ...)."""
    if isinstance(statement, exp.Command):
        return str(statement.this).upper()
    if isinstance(statement, (exp.Union, exp.Intersect, exp.Except)):
        return type(statement).__name__.upper()
    return _first_keyword(sql)


def _first_keyword(sql: str) -> str:
    """The statement's first word as the analyst wrote it (comments skipped), upper-cased."""
    try:
        tokens = _DUCKDB.tokenize(sql)
    except TokenError:
        return "unreadable"
    return tokens[0].text.upper()[:40] if tokens else "empty"
