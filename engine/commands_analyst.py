"""The analyst's commands: query, explain (one SQL text or a workload file), history and
report, with the checks of what the command line gave them."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..calibration import MODE_CHOICES, MODEL_MODE
from . import progress
from .accounting.ledger import read_history
from .commands_output import print_history, show_entry, show_explanation, show_result
from .database import DEFAULT_ANALYST, ENGINES, PrivateDatabase
from .errors import InputError, PolicyError
from .policy_yaml import load_policy
from .progress_bar import progress_bar

if TYPE_CHECKING:  # the report and the service client are imported by the calls that use them
    from .report.values import Report
    from .service.client import Service

QUERY_FORMATS = click.Choice(["table", "json", "csv"])
EXPLAIN_FORMATS = click.Choice(["table", "json"])


def _common(func, local: bool = True):
    """Options shared by `query` and `explain` (`local=False`: the data options become optional,
    since `query --server` asks a service instead)."""
    options = [
        click.option("--db", required=local, envvar="DPSQL_DB",
                     help="DuckDB, CSV or Parquet file with the private data (with --engine spark: "
                          "a Parquet or CSV file or Parquet folder for a policy with one table, a "
                          "folder holding one such file per table named after it, or a catalog "
                          "table; or the environment variable DPSQL_DB)."),
        click.option("--engine", type=click.Choice(ENGINES), default="duckdb", show_default=True,
                     help="Where the exact aggregates are computed (spark: a local Spark session; "
                          "needs pip install 'dpsql[spark]')."),
        click.option("--policy", "policy_path", required=local, envvar="DPSQL_POLICY",
                     help="The data owner's policy (YAML; or the environment variable DPSQL_POLICY)."),
        click.option("--ledger", required=local, envvar="DPSQL_LEDGER",
                     help="sqlite ledger file recording the budget spent (or the environment "
                          "variable DPSQL_LEDGER)."),
        click.option("--epsilon", type=float, default=None,
                     help="Information-privacy level this answer must meet (> 0)."),
        click.option("--cost", type=float, default=None,
                     help="Instead of --epsilon: the most the transcript's level may rise (> 0); "
                          "the answer alone is then at most this private too."),
        click.option("--mode", type=click.Choice(MODE_CHOICES + (MODEL_MODE,)), default=None,
                     help="Calibration mode (default: the policy's; model: a declared model)."),
        click.option("--analyst", default=DEFAULT_ANALYST, show_default=True,
                     help="Name recorded in the ledger."),
        click.option("--reuse/--no-reuse", default=None,
                     help="--reuse (the default): answer a query you asked before, or a "
                          "marginal, total or kept groups of a table you were released, from "
                          "your released answers at no charge, when at least as accurate as "
                          "asked. --no-reuse: charge and draw fresh noise."),
        click.argument("sql", metavar="SQL", required=False),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command(help="Answer a SQL query privately and charge the ledger (or ask a dpsql service "
             "with --server and --token).")
@functools.partial(_common, local=False)
@click.option("--format", "fmt", type=QUERY_FORMATS, default="table", show_default=True)
@click.option("--server", default=None, help="URL of a dpsql service to ask instead of the data "
              "(then give --token, not --db, --policy, --ledger or --analyst).")
@click.option("--token", envvar="DPSQL_TOKEN", default=None,
              help="Your token for --server (or the environment variable DPSQL_TOKEN).")
@click.option("--file", "workload", default=None, type=click.Path(dir_okay=False),
              help="Answer the statements of this file (separated by ';') together, at --epsilon "
                   "(or --cost) for the whole set, charged once (instead of SQL).")
@click.option("--ci95", type=float, default=None,
              help="Instead of --epsilon: the smallest epsilon whose 95%% half-width on every "
                   "noisy cell is at most this (asks for confirmation unless --yes).")
@click.option("--yes", is_flag=True, help="Spend the epsilon --ci95 finds without asking.")
def query(db, engine, policy_path, ledger, epsilon, cost, mode, analyst, reuse, fmt, server,
          token, workload, ci95, yes, sql) -> None:
    service = _service(server, token)
    asked = _asked("answer", sql, workload, ci95, db, engine, policy_path, ledger, epsilon, cost,
                   mode, analyst, fmt, service, confirm=not yes)
    if asked is None:
        return
    sql, epsilon = asked
    if service is not None:
        with service.client() as client:
            result = client.query(sql, epsilon=epsilon, mode=mode, cost=cost, reuse=reuse)
        show_result(result, fmt)
        return
    missing = [name for name, value in (("--db", db), ("--policy", policy_path), ("--ledger", ledger))
               if value is None]
    if missing:
        raise InputError(f"missing option {', '.join(missing)}: a local query needs --db, --policy "
                         "and --ledger (or DPSQL_DB, DPSQL_POLICY and DPSQL_LEDGER in the "
                         "environment; or ask a service with --server URL --token TOKEN)")
    _check_level(epsilon, cost)
    notice = _bounding_notice(db, policy_path, ledger, fmt == "table" and sys.stderr.isatty())
    with progress_bar(fmt == "table"), progress.listening(notice), \
            _open(db, policy_path, ledger, analyst, engine, reuse) as private:
        result = private.query(sql, epsilon=epsilon, mode=mode, cost=cost)
    show_result(result, fmt)


def _written_locally() -> list[str]:
    """The local data options written on the command line: a mistake beside --server. Those
    set in the environment (DPSQL_DB, ...) are for local queries and do not count."""
    context = click.get_current_context()
    return [name for name, key in (("--db", "db"), ("--policy", "policy_path"),
                                   ("--ledger", "ledger"))
            if context.get_parameter_source(key) == click.core.ParameterSource.COMMANDLINE]


def _asked(verb: str, sql: str | None, workload: str | None, ci95: float | None, db, engine,
           policy_path, ledger, epsilon: float | None, cost: float | None, mode, analyst, fmt: str,
           service: Service | None, confirm: bool) -> tuple[str, float | None] | None:
    """The SQL text and epsilon `query` or `explain` asks (`verb`: answer or explain), the epsilon
    found by --ci95 when given (by the service, with --server); None when a workload file
    (--file) was answered or explained instead."""
    sql = None if sql is None else _sql_text(sql)
    if ci95 is not None:
        from .workload_cli import epsilon_by_accuracy

        epsilon = epsilon_by_accuracy(workload, sql, db, engine, policy_path, ledger, epsilon,
                                      cost, mode, analyst, service, ci95, confirm=confirm)
    if workload is not None:
        from .workload_cli import run_workload

        run_workload(workload, sql, db, engine, policy_path, ledger, epsilon, cost, mode, analyst,
                     fmt, service, explain=verb == "explain")
        return None
    if sql is None:
        raise InputError(f"give the SQL to {verb}, or --file with a workload of statements")
    return sql, epsilon


def _sql_text(sql: str) -> str:
    """The SQL argument, or the SQL read from standard input when it is `-`."""
    if sql != "-":
        return sql
    text = str(sys.stdin.read())
    if not text.strip():
        raise InputError("SQL '-' reads the query from standard input, which was empty")
    return text


def _check_level(epsilon: float | None, cost: float | None) -> None:
    """Exactly one of --epsilon and --cost, named as the command line writes them."""
    if epsilon is None and cost is None:
        raise InputError("missing option --epsilon: the privacy level this answer must meet, "
                         "e.g. --epsilon 0.5 (or --cost, the most the transcript's level may rise)")
    if epsilon is not None and cost is not None:
        raise InputError(f"give --epsilon or --cost, not both (got --epsilon {epsilon:g} and "
                         f"--cost {cost:g})")


def _open(db: str, policy_path: str, ledger: str, analyst: str, engine: str,
          reuse: bool | None = None) -> PrivateDatabase:
    """PrivateDatabase.connect, its refusals naming what the command line gave: a DuckDB file
    given as --ledger, a CSV or Parquet --db whose table (named after the file) the policy does
    not list."""
    _check_ledger_file(ledger)
    try:
        return PrivateDatabase.connect(db, policy=policy_path, ledger=ledger, analyst=analyst,
                                       engine=engine, reuse=reuse is not False)
    except PolicyError as exc:
        from pathlib import Path

        name = Path(str(db)).name
        table = str(exc).split(":", 1)[0].removeprefix("tables.")
        if engine != "duckdb" or "no such table in the data" not in str(exc) \
                or not str(db).lower().endswith((".csv", ".tsv", ".parquet", ".pq")):
            raise
        raise PolicyError(
            f"{exc}: a CSV or Parquet file given as --db holds one table, named after the file "
            f"({Path(name).stem.lower()!r} for {name}); rename the file after the "
            f"policy's table ({table}{Path(name).suffix.lower()}) or load it into a DuckDB "
            "database") from None


_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_ledger_file(ledger: str) -> None:
    """Refuse, naming it, a --ledger that is a DuckDB database (the data, not a ledger)."""
    try:
        with open(ledger, "rb") as handle:
            head = handle.read(16)
    except OSError:
        return  # a missing or unreadable ledger: the ledger's own message says so
    if not head.startswith(_SQLITE_HEADER) and head[8:12] == b"DUCK":
        raise InputError(f"--ledger {ledger} is a DuckDB database, not a dpsql ledger (an sqlite "
                         "file made by dpsql ledger init); did you mean --db "
                         f"{ledger}?")


BOUNDING_RATE = "2 to 4 s per million rows"
"""What bounding a table per privacy unit took in one process on a busy 2-core machine (50 s at
20 million rows: benchmarks/RESULTS.md, "A CLI call on 20,000,000 rows"; 34 s at 10 million)."""


def _bounding_notice(db: str, policy_path: str, ledger: str, wanted: bool) -> Callable[[str], None]:
    """Say on standard error, once, when a query bounds a table itself because the owner has not
    prepared its bounded copy for this data, policy and ledger. Only where the progress bar may
    be drawn (`wanted`: a table for reading, on a terminal), so scripts reading JSON or CSV see
    exactly what they did before; it says only what the policy names and whether a copy was
    prepared, nothing of the data."""
    said = not wanted

    def notice(label: str) -> None:
        nonlocal said
        if said or not label.startswith("bounding rows per "):
            return
        said = True
        click.echo(f"dpsql: {label}: this process bounds the table once before answering (about "
                   f"{BOUNDING_RATE} on a 2-core machine), and every new process does it again; "
                   f"the data owner can make the bounded copy once for all later queries with "
                   f"dpsql prepare --db {db} --policy {policy_path} --ledger {ledger}", err=True)
    return notice


@click.command(help="Show the plan, rewritten SQL, sensitivities, noise and cost; spends nothing.")
@_common
@click.option("--format", "fmt", type=EXPLAIN_FORMATS, default="table", show_default=True)
@click.option("--file", "workload", default=None, type=click.Path(dir_okay=False),
              help="Explain the statements of this file (separated by ';') as one workload: its "
                   "strategy, each statement's expected error against asking them separately, "
                   "and the cost.")
@click.option("--ci95", type=float, default=None,
              help="Instead of --epsilon: explain at the smallest epsilon whose 95%% half-width "
                   "on every noisy cell is at most this.")
def explain(db, engine, policy_path, ledger, epsilon, cost, mode, analyst, reuse, fmt, workload,
            ci95, sql) -> None:
    asked = _asked("explain", sql, workload, ci95, db, engine, policy_path, ledger, epsilon, cost,
                   mode, analyst, fmt, None, confirm=False)
    if asked is None:
        return
    sql, epsilon = asked
    _check_level(epsilon, cost)
    with progress_bar(fmt == "table"), \
            _open(db, policy_path, ledger, analyst, engine, reuse) as private:
        explanation = private.explain(sql, epsilon=epsilon, mode=mode, cost=cost)
    show_explanation(explanation, fmt)


@click.command(help="Show your released answers again, as stored with their charges: no charge, "
             "no fresh noise.")
@click.option("--ledger", required=True, envvar="DPSQL_LEDGER",
              help="The sqlite ledger (read only, never modified; or DPSQL_LEDGER).")
@click.option("--analyst", default=DEFAULT_ANALYST, show_default=True,
              help="Whose answers to show.")
@click.option("--id", "ident", type=click.IntRange(min=1), default=None,
              help="Print this answer again, exactly as it was released.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def history(ledger, analyst, ident, fmt) -> None:
    entries = read_history(ledger, analyst, ident)
    if ident is not None:
        if not entries:
            raise InputError(f"no released answer with id {ident} for analyst {analyst!r} in "
                             f"{ledger}; list them with dpsql history --ledger {ledger}")
        show_entry(entries[0], fmt)
    elif fmt == "json":
        click.echo(json.dumps([e.to_dict() for e in entries], allow_nan=False))
    else:
        print_history(entries)


@click.command(name="report", help="Report the budget spent: per answer, per analyst, totals and "
             "what the transcript guarantees.")
@click.option("--ledger", required=True, envvar="DPSQL_LEDGER",
              help="The sqlite ledger to report on (never modified; or DPSQL_LEDGER).")
@click.option("--policy", "policy_path", default=None,
              help="Policy (YAML) to check against the ledger's binding (default: the ledger's own).")
@click.option("--analyst", default=None, help="Show only this analyst's answers; totals stay global.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown", "html"]),
              default="table", show_default=True)
@click.option("--output", default=None, help="Write the report to this file instead of standard output.")
@click.option("--plot", "plot_path", default=None, help="Also write the cumulative spend plot (.png).")
def report_command(ledger, policy_path, analyst, fmt, output, plot_path) -> None:
    from .report.build import build_report
    from .report.plot import plot_png

    if plot_path is not None and not plot_path.lower().endswith(".png"):
        raise InputError(f"--plot must name a .png file, got {plot_path!r}")
    policy = None if policy_path is None else load_policy(policy_path)
    report = build_report(ledger, policy=policy, analyst=analyst)
    text = _render_report(report, fmt, output)
    if output is None:
        click.echo(text, nl=False)
    else:
        _write(output, text.encode("utf-8"))
    if plot_path is not None:
        _write(plot_path, plot_png(report))


def _service(server: str | None, token: str | None) -> Service | None:
    """The client of the service at `server` (None: answer locally)."""
    if server is None:
        return None
    from .service.client import Service

    return Service(server, token, _written_locally())


def _render_report(report: Report, fmt: str, output: str | None) -> str:
    """The report as text; a file gets a fixed width, a terminal its own."""
    from rich.console import Console

    from .report.render import render_html, render_markdown, render_table

    if fmt == "json":
        return json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n"
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    return render_table(report, width=120 if output else Console().width)


def _write(path: str, data: bytes) -> None:
    """Write an output file, turning an OS failure into one line naming the file."""
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
