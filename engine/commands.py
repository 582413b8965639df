"""The `dpsql` commands: query, explain, history, calibrate, report, prepare, ledger and dependence
(engine/cli.py is the entry point that loads them)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

import click

from .. import __version__
from ..calibration import MODE_CHOICES, MODEL_MODE, CalibrationError, DependenceModel, compare_modes
from . import progress
from .accounting.analysts import ROLES
from .accounting.ledger import Ledger, read_history
from .accounting.ledger_binding import binding_of
from .bounded_store import store_dir
from .database import DEFAULT_ANALYST, ENGINES, PrivateDatabase
from .display import cell as _cell
from .display import csv_text, visible
from .display import number as _number
from .errors import DpsqlError, InputError, PolicyError
from .execute import prepare_copies
from .policy import load_policy
from .progress_bar import progress_bar
from .report import Report, build_report
from .result import Explanation, HistoryEntry, QueryResult, from_clause
from .service.auth import check_cap, check_name, new_analyst
from .service.client import remote_query
from .service.limits import Limits

if TYPE_CHECKING:
    from rich.console import Console

# rich, the owner's dependence tools and the report renderers are imported by the commands that
# use them, so a `dpsql query --format json` process does not load them (measured start-up cost:
# benchmarks/RESULTS.md, "A CLI call").

QUERY_FORMATS = click.Choice(["table", "json", "csv"])
EXPLAIN_FORMATS = click.Choice(["table", "json"])


def _common(func, local: bool = True):
    """Options shared by `query` and `explain` (`local=False`: the data options become optional,
    since `query --server` asks a service instead)."""
    options = [
        click.option("--db", required=local, envvar="DPSQL_DB",
                     help="DuckDB, CSV or Parquet file with the private data (with --engine spark: "
                          "a Parquet file or folder, or a catalog table; or the environment "
                          "variable DPSQL_DB)."),
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
        click.argument("sql", metavar="SQL", required=False),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(help="Differentially private SQL for dependent records.")
@click.version_option(__version__, prog_name="dpsql")
def cli() -> None:
    """Command group."""


@cli.command(help="Answer a SQL query privately and charge the ledger (or ask a dpsql service "
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
def query(db, engine, policy_path, ledger, epsilon, cost, mode, analyst, fmt, server, token,
          workload, ci95, yes, sql) -> None:
    sql = None if sql is None else _sql_text(sql)
    if ci95 is not None:
        from .workload_cli import epsilon_by_accuracy

        epsilon = epsilon_by_accuracy(workload, sql, db, engine, policy_path, ledger, epsilon,
                                      cost, mode, analyst, server, ci95, confirm=not yes)
    if workload is not None:
        from .workload_cli import run_workload

        run_workload(workload, sql, db, engine, policy_path, ledger, epsilon, cost, mode, analyst,
                     fmt, server, explain=False)
        return
    if sql is None:
        raise InputError("give the SQL to answer, or --file with a workload of statements")
    if server is not None:
        # Options set in the environment (DPSQL_DB, ...) are for local queries: only those
        # written on the command line are a mistake beside --server.
        written = [name for name, key in (("--db", "db"), ("--policy", "policy_path"),
                                          ("--ledger", "ledger"))
                   if click.get_current_context().get_parameter_source(key)
                   == click.core.ParameterSource.COMMANDLINE]
        result = remote_query(server, token, sql, epsilon=epsilon, mode=mode, cost=cost,
                              local=written)
        _show_result(result, fmt)
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
            _open(db, policy_path, ledger, analyst, engine) as private:
        result = private.query(sql, epsilon=epsilon, mode=mode, cost=cost)
    _show_result(result, fmt)


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


def _open(db: str, policy_path: str, ledger: str, analyst: str, engine: str) -> PrivateDatabase:
    """PrivateDatabase.connect, its refusals naming what the command line gave: a DuckDB file
    given as --ledger, a CSV or Parquet --db whose table (named after the file) the policy does
    not list."""
    _check_ledger_file(ledger)
    try:
        return PrivateDatabase.connect(db, policy=policy_path, ledger=ledger, analyst=analyst,
                                       engine=engine)
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


def _show_result(result: QueryResult, fmt: str) -> None:
    """Print an answer (fresh or from history) in the chosen format."""
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), allow_nan=False))
    elif fmt == "csv":
        click.echo(_csv(result), nl=False)
    else:
        _print_result(result)


@cli.command(help="Show the plan, rewritten SQL, sensitivities, noise and cost; spends nothing.")
@_common
@click.option("--format", "fmt", type=EXPLAIN_FORMATS, default="table", show_default=True)
@click.option("--file", "workload", default=None, type=click.Path(dir_okay=False),
              help="Explain the statements of this file (separated by ';') as one workload: its "
                   "strategy, each statement's expected error against asking them separately, "
                   "and the cost.")
@click.option("--ci95", type=float, default=None,
              help="Instead of --epsilon: explain at the smallest epsilon whose 95%% half-width "
                   "on every noisy cell is at most this.")
def explain(db, engine, policy_path, ledger, epsilon, cost, mode, analyst, fmt, workload, ci95,
            sql) -> None:
    sql = None if sql is None else _sql_text(sql)
    if ci95 is not None:
        from .workload_cli import epsilon_by_accuracy

        epsilon = epsilon_by_accuracy(workload, sql, db, engine, policy_path, ledger, epsilon,
                                      cost, mode, analyst, None, ci95, confirm=False)
    if workload is not None:
        from .workload_cli import run_workload

        run_workload(workload, sql, db, engine, policy_path, ledger, epsilon, cost, mode, analyst,
                     fmt, None, explain=True)
        return
    if sql is None:
        raise InputError("give the SQL to explain, or --file with a workload of statements")
    _check_level(epsilon, cost)
    with progress_bar(fmt == "table"), _open(db, policy_path, ledger, analyst, engine) as private:
        explanation = private.explain(sql, epsilon=epsilon, mode=mode, cost=cost)
    if fmt == "json":
        click.echo(json.dumps(explanation.to_dict(), allow_nan=False))
    else:
        _print_explanation(explanation)


@cli.command(help="Show your released answers again, as stored with their charges: no charge, "
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
        _show_entry(entries[0], fmt)
    elif fmt == "json":
        click.echo(json.dumps([e.to_dict() for e in entries], allow_nan=False))
    else:
        _print_history(entries)


def _show_entry(entry: HistoryEntry, fmt: str) -> None:
    """One stored answer, printed as it was when released."""
    if entry.answer is None:
        raise InputError(f"answer {entry.id} has no stored answer (it was charged before answers "
                         "were stored, in a schema version 2 ledger); only its charge is recorded")
    if fmt == "json":
        click.echo(json.dumps(entry.answer, allow_nan=False))
    elif "answers" in entry.answer:  # a workload's answers (dpsql query --file)
        from .workload_cli import print_stored

        print_stored(entry.answer)
    else:
        _print_result(QueryResult.from_dict(entry.answer, entry.id))


def _print_history(entries: tuple[HistoryEntry, ...]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Released answers (dpsql history --id N prints one again)")
    for name in ("id", "time", "sql", "epsilon", "epsilon_dp", "cost"):
        table.add_column(name)
    for e in entries:
        cost = "-" if e.answer is None else _number(e.answer["cost"])
        table.add_row(str(e.id), e.time[:19], Text(visible(e.sql)), _number(e.epsilon),
                      _number(e.epsilon_dp), cost)
    _console().print(table)


@cli.command(name="init", help="Owner: write a starter policy from a data file's schema alone "
             "(types filled in; bounds, domains, unit, dependence and budget left as marked blanks "
             "to fill from public knowledge, never from the data).")
@click.option("--db", required=True, help="DuckDB, CSV or Parquet file with the private data.")
@click.option("--output", "-o", default="-", show_default=True,
              help="Where to write the policy (- for standard output); an existing file is kept.")
def init(db, output) -> None:
    from pathlib import Path

    from .starter_policy import starter_policy

    text = starter_policy(db)
    if output == "-":
        click.echo(text, nl=False)
        return
    target = Path(output)
    if target.exists():
        raise InputError(f"{target} exists; dpsql init never overwrites a policy (choose another "
                         "--output or remove it)")
    target.write_text(text)
    click.echo(f"wrote {target}: fill in every FILL IN before opening the data with it", err=True)


@cli.group(name="ledger", help="Create budget ledgers (the data owner's act).")
def ledger_group() -> None:
    """Command group."""


@ledger_group.command(name="init", help="Create a new ledger bound to a policy's budget, k, eta "
                      "and mode; refuses a path that exists.")
@click.option("--ledger", "path", required=True, help="Where to create the sqlite ledger.")
@click.option("--policy", "policy_path", required=True, help="The data owner's policy (YAML).")
def ledger_init(path, policy_path) -> None:
    policy = load_policy(policy_path)
    Ledger(path, binding_of(policy), create=True).close()
    models = f", {len(policy.models)} declared model(s)" if policy.models else ""
    mode = (f"model ({policy.mode} where no declared model covers a query)" if policy.prefer_model
            else policy.mode)
    click.echo(f"created ledger {path}: budget {policy.budget_epsilon:g}, k={policy.k}, "
               f"eta={policy.eta:g}, mode {mode}{models}")


@cli.command(help="Owner: bound every table with a privacy unit once and keep the kept rows beside "
             "the ledger, so later queries skip that step; redo it after the data, the policy's "
             "bounds or the ledger change (a stale copy is never used). The files are as private "
             "as the data.")
@click.option("--db", required=True, help="DuckDB, CSV or Parquet file with the private data.")
@click.option("--policy", "policy_path", required=True, help="The data owner's policy (YAML).")
@click.option("--ledger", "path", required=True, help="The ledger whose queries will use the copies.")
def prepare(db, policy_path, path) -> None:
    from rich.table import Table
    from rich.text import Text

    policy = load_policy(policy_path)
    book = Ledger(path, binding_of(policy))
    try:
        with progress_bar(True):
            copies = prepare_copies(db, policy, book.hash_key, store_dir(path))
    finally:
        book.close()
    table = Table(title=f"Bounded copies for {path}")
    for name in ("table", "rows kept", "on disk", "seconds", "file"):
        table.add_column(name)
    for c in copies:
        table.add_row(Text(visible(c.table)), f"{c.rows:,}", f"{c.bytes / 2**20:,.1f} MB",
                      f"{c.seconds:.2f}", Text(visible(str(c.path))))
    _console().print(table if copies else "no table has a privacy unit: nothing to prepare")


@ledger_group.command(name="resume", help="After inspecting a halt (a query that passed every "
                      "check failed on the data), print why it halted and let queries run again.")
@click.option("--ledger", "path", required=True, help="The halted sqlite ledger.")
@click.option("--policy", "policy_path", required=True, help="The data owner's policy (YAML).")
def ledger_resume(path, policy_path) -> None:
    from rich.text import Text

    book = Ledger(path, binding_of(load_policy(policy_path)))
    try:
        reason = book.resume()
    finally:
        book.close()
    if reason is None:
        raise InputError(f"ledger {path} is not halted; nothing to resume")
    _console().print(Text(visible(f"halted at {reason}; queries may run again")))


@cli.group(name="analyst", help="Manage who may ask a dpsql service (the data owner's act): "
           "tokens, roles and caps, kept in the ledger.")
def analyst_group() -> None:
    """Command group."""


@analyst_group.command(name="add", help="Add an analyst and print their new token on its own line "
                       "(shown once: only its hash is stored).")
@click.argument("name")
@click.option("--ledger", "path", required=True, help="The sqlite ledger the service uses.")
@click.option("--cap", type=float, default=None,
              help="The most the information-privacy level of this analyst's own answers may reach.")
@click.option("--role", type=click.Choice(ROLES), default="analyst", show_default=True,
              help="analyst: schema, explain, query, own history and budget; accountant: every "
                   "history and the report, read-only.")
def analyst_add(name, path, cap, role) -> None:
    with Ledger.reopen(path) as book:
        analyst, token = new_analyst(book, name, role, cap)
    click.echo(f"added {analyst.role} {analyst.name!r}"
               + ("" if analyst.cap is None else f" with cap {analyst.cap:g}")
               + "; their token (shown once, give it to them privately):", err=True)
    click.echo(token)


@analyst_group.command(name="list", help="List analysts: role, cap, own spending, revoked or not.")
@click.option("--ledger", "path", required=True, help="The sqlite ledger the service uses.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def analyst_list(path, fmt) -> None:
    from rich.table import Table
    from rich.text import Text

    with Ledger.reopen(path) as book:
        accounts = [book.account(a.name) for a in book.analysts()]
    rows = [{**asdict(a.analyst), "spent_dp": a.spent_dp} for a in accounts if a is not None]
    if fmt == "json":
        click.echo(json.dumps(rows, allow_nan=False))
        return
    table = Table(title=f"Analysts of {path}")
    for column in ("name", "role", "cap", "spent_dp", "created", "revoked"):
        table.add_column(column)
    for row in rows:
        table.add_row(Text(visible(row["name"])), row["role"],
                      "-" if row["cap"] is None else _number(row["cap"]), _number(row["spent_dp"]),
                      row["created"][:19], row["revoked"] or "-")
    _console().print(table)


@analyst_group.command(name="revoke", help="Revoke an analyst's token at once (their answers stay "
                       "recorded; a revoked name is never reused).")
@click.argument("name")
@click.option("--ledger", "path", required=True, help="The sqlite ledger the service uses.")
def analyst_revoke(name, path) -> None:
    from rich.text import Text

    with Ledger.reopen(path) as book:
        analyst = book.update_analyst(name, revoke=True)
    _console().print(Text(visible(f"revoked {analyst.name!r} at {analyst.revoked}")))


@analyst_group.command(name="cap", help="Set an analyst's cap on the level of their own answers "
                       "('none': no cap of their own; the global budget always binds).")
@click.argument("name")
@click.argument("epsilon")
@click.option("--ledger", "path", required=True, help="The sqlite ledger the service uses.")
def analyst_cap(name, epsilon, path) -> None:
    from rich.text import Text

    try:
        cap = None if epsilon.lower() == "none" else float(epsilon)
    except ValueError:
        raise InputError(f"cap must be a number > 0 or 'none', got {epsilon!r}") from None
    with Ledger.reopen(path) as book:
        analyst = book.update_analyst(check_name(name), cap=check_cap(cap))
    _console().print(Text(visible(f"cap of {analyst.name!r}: "
                                  + ("none" if analyst.cap is None else f"{analyst.cap:g}"))))


@cli.command(help="Serve analysts over HTTP (and the Postgres protocol with --pg-port): the data and "
             "ledger stay here, analysts hold tokens (dpsql analyst add). Runs until interrupted.")
@click.option("--db", required=True, help="DuckDB, CSV or Parquet file with the private data.")
@click.option("--policy", "policy_path", required=True, help="The data owner's policy (YAML).")
@click.option("--ledger", required=True, help="sqlite ledger file recording the budget spent.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--tls-cert", default=None, help="PEM certificate: serve HTTPS (with --tls-key).")
@click.option("--tls-key", default=None, help="PEM private key of --tls-cert.")
@click.option("--rate", type=click.FloatRange(min=0.01), default=Limits.rate, show_default=True,
              help="Requests per second each analyst may sustain.")
@click.option("--burst", type=click.IntRange(min=1), default=Limits.burst, show_default=True,
              help="Requests each analyst may send at once.")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDR",
              help="A reverse proxy whose X-Forwarded-For header names the client (repeatable); "
              "without one, forwarded headers are ignored.")
@click.option("--pg-port", type=click.IntRange(0, 65535), default=None,
              help="Also speak the Postgres wire protocol on this port (psql, psycopg, JDBC): user = "
              "analyst name, password = token.")
def serve(db, policy_path, ledger, host, port, tls_cert, tls_key, rate, burst, trusted_proxies,
          pg_port) -> None:
    from .service.server import serve as run_server  # uvicorn and FastAPI load only to serve

    run_server(db, policy_path, ledger, host, port, tls_cert, tls_key,
               replace(Limits(), rate=rate, burst=burst), tuple(trusted_proxies), pg_port=pg_port)


@cli.command(help="Show epsilon_dp and noise relative to group privacy for every mode.")
@click.option("--epsilon", required=True, type=float, help="Information-privacy target (> 0).")
@click.option("--k", "k", required=True, type=int, help="Largest group of dependent individuals.")
@click.option("--eta", required=True, type=float, help="Total-variation dependence bound in [0, 1].")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def calibrate(epsilon, k, eta, fmt) -> None:
    from rich.table import Table

    try:
        options = compare_modes(epsilon, DependenceModel(k, eta))
    except CalibrationError as exc:
        raise DpsqlError(str(exc)) from None
    if fmt == "json":
        payload = {"epsilon": epsilon, "k": k, "eta": eta, "modes": [asdict(o) for o in options]}
        click.echo(json.dumps(payload, allow_nan=False))
        return
    table = Table(title=f"Calibration for epsilon={epsilon:g}, k={k}, eta={eta:g}")
    for name in ("mode", "applies", "epsilon_dp", "noise vs group", "justification"):
        table.add_column(name)
    for o in options:
        table.add_row(o.mode, "yes" if o.applies else "no",
                      "-" if o.epsilon_dp is None else f"{o.epsilon_dp:.4f}",
                      "-" if o.noise_vs_group is None else f"{o.noise_vs_group:.3f}",
                      o.justification)
    _console().print(table)


OWNER_SIDE = ("OWNER-SIDE: its output is computed from the private data and is for the data "
              "owner only; never show it to analysts.")


@cli.group(name="dependence", help="Data owner's tools for the dependence model: check k against "
           "the data, compute eta per column set. " + OWNER_SIDE)
def dependence_group() -> None:
    """Command group."""


@dependence_group.command(name="check", help="Report each table's largest dependence group and "
                          "how many groups exceed the policy's k; exit 2 if any does (the policy "
                          "is then not valid for this data). " + OWNER_SIDE)
@click.option("--db", required=True, help="DuckDB, CSV or Parquet file with the private data.")
@click.option("--policy", "policy_path", required=True,
              help="The policy (YAML); tables name their dependence_group column.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def dependence_check(db, policy_path, fmt) -> None:
    from .chain_check import check_chain
    from .dependence_data import check_groups, open_owner_data
    from .dependence_report import print_chain_checks, print_checks
    from .execute import open_data

    policy = load_policy(policy_path)
    tables = [t for t in policy.tables.values() if t.dependence_group is not None]
    chains = [m for m in policy.models if m.chain is not None]
    if not tables and not chains:
        raise PolicyError("no table names a dependence_group column: add e.g. "
                          "`dependence_group: household_id` to a table in the policy")
    checks = []
    for table in tables:
        conn = open_owner_data(db, policy, table)
        try:
            checks.append(check_groups(conn, table, policy.k))
        finally:
            conn.close()
    chain_checks = []
    if chains:
        conn = open_data(db, policy)
        try:
            chain_checks = [check_chain(conn, m, policy.tables[m.table]) for m in chains]
        finally:
            conn.close()
    if fmt == "json":
        rows = [asdict(c) | {"valid": c.valid} for c in checks]
        rows += [asdict(c) | {"valid": c.valid} for c in chain_checks]
        click.echo(json.dumps(rows, allow_nan=False))
    else:
        if checks:
            print_checks(_console(), checks)
        if chain_checks:
            print_chain_checks(_console(), chain_checks)
    broken = next((c for c in chain_checks if not c.valid), None)
    if broken is not None:
        raise PolicyError(
            f"policy not valid for this data: the Markov chain of {broken.table}.{broken.column} "
            f"needs one row per person and time point inside its ranges, but {broken.outside_times}"
            f" row(s) have {broken.time} NULL or outside its bounds, {broken.outside_values} have "
            f"{broken.column} NULL or outside its values and {broken.repeated or 0} repeat a "
            "(person, time point); fix the data or the policy", outside_times=broken.outside_times,
            outside_values=broken.outside_values, repeated=broken.repeated or 0)
    bad = [c for c in checks if not c.valid]
    if bad:
        raise PolicyError(f"policy not valid for this data: {bad[0].over_k} group(s) of table "
                          f"{bad[0].table} have more than k = {bad[0].k} units (largest "
                          f"{bad[0].largest}); raise dependence.k or fix the groups",
                          largest=bad[0].largest, over_k=bad[0].over_k)


@dependence_group.command(name="eta", help="eta per column set (every policy column, and each "
                          "--columns set) from a declared model (--model) and/or fitted to the data "
                          "(--db) with an upper confidence bound, the eps_dp each gives, and a ready "
                          "policy dependence block. With --db: " + OWNER_SIDE)
@click.option("--policy", "policy_path", required=True, help="The policy (YAML).")
@click.option("--table", "table_name", default=None, help="Policy table (default: the only one).")
@click.option("--model", "model_path", default=None, help="Household model file (YAML, README).")
@click.option("--db", default=None, help="Private data to fit the model to (needs the table's "
                                         "dependence_group).")
@click.option("--columns", "asked", multiple=True,
              help="A column set a query may read, comma-separated (e.g. sick,age); repeatable.")
@click.option("--epsilon", type=float, default=1.0, show_default=True,
              help="Information-privacy level at which eps_dp is shown.")
@click.option("--confidence", type=click.FloatRange(0.5, 1.0, max_open=True), default=0.95,
              show_default=True, help="Confidence of the fit's upper bound.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def dependence_eta(policy_path, table_name, model_path, db, asked, epsilon, confidence, fmt) -> None:
    from .dependence_data import fit_sets, open_owner_data
    from .dependence_model import load_model
    from .dependence_report import column_sets, eta_report, fittable, print_report

    policy = load_policy(policy_path)
    if model_path is None and db is None:
        raise InputError("give --model (a household model file), --db (data to fit), or both")
    if table_name is None and len(policy.tables) != 1:
        raise InputError(f"--table: the policy has several tables ({', '.join(policy.tables)}); name one")
    name = (table_name or next(iter(policy.tables))).lower()
    if name not in policy.tables:
        raise InputError(f"--table {table_name!r}: expected one of {', '.join(policy.tables)}")
    table = policy.tables[name]
    sets = column_sets(table, asked)
    model = load_model(model_path) if model_path is not None else None
    fit = None
    if db is not None:
        conn = open_owner_data(db, policy, table)
        try:
            fit = fit_sets(conn, table, policy.k, [s for s in sets if not fittable(table, s)], confidence)
        finally:
            conn.close()
    report = eta_report(policy, table, sets, epsilon, model, fit)
    if fmt == "json":
        click.echo(json.dumps(asdict(report), allow_nan=False))
    else:
        print_report(_console(), report)


@cli.command(name="report", help="Report the budget spent: per answer, per analyst, totals and "
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
    from .report_plot import plot_png

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


def _render_report(report: Report, fmt: str, output: str | None) -> str:
    """The report as text; a file gets a fixed width, a terminal its own."""
    from rich.console import Console

    from .report_render import render_html, render_markdown, render_table

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


def _print_result(result: QueryResult) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for name in result.df.columns:
        header = visible(str(name))  # as wide as its longest word: cells wrap, names do not
        table.add_column(Text(header), justify="right",
                         min_width=min(max(map(len, header.split() or [""])), 30))
    intervals, intervals_note = result.shown_intervals()
    ranges = result.ranges()
    for row, ci in zip(result.df.itertuples(index=False), intervals.itertuples(index=False),
                       strict=True):
        table.add_row(*(Text(_cell(v, float(c), r)) for v, c, r in zip(row, ci, ranges, strict=True)))
    console = _console()
    console.print(Text(visible(result.sql)))
    console.print(table)
    console.print(intervals_note)
    for line in result.interval_notes():
        console.print(Text(visible(line)))
    console.print(
        f"epsilon {_number(result.epsilon)} (information privacy under k={result.k}, "
        f"eta={_number(result.eta)}{from_clause(result.eta_from)}) -> epsilon_dp "
        f"{_number(result.epsilon_dp)} via the {result.mode} bound"
    )
    console.print(Text(f"columns read: {', '.join(result.columns_read) or 'none'}; the "
                       f"transcript's eta is now {_number(result.budget.eta)}"
                       f"{from_clause(result.budget.eta_from)}"))
    b = result.budget
    console.print(
        f"cost {_number(result.cost)}: transcript level {_number(result.level_before)} -> "
        f"{_number(b.spent_ip)} of budget {_number(b.total)}; {result.largest_line()}"
        + ("" if result.id is None else f" (answer id {result.id}: dpsql history --id {result.id})")
    )


def _print_explanation(ex: Explanation) -> None:
    from rich.table import Table
    from rich.text import Text

    console = _console()
    unit = f"privacy unit {ex.privacy_unit}, at most {ex.max_rows_per_unit} row(s) each" \
        if ex.privacy_unit else "each row is one individual"
    console.print(Text(f"table {ex.table} ({unit}); groups: {', '.join(ex.group_by) or 'none'} "
                       f"({ex.groups} output row(s))"))
    console.print(Text(f"epsilon {_number(ex.epsilon)} -> epsilon_dp {_number(ex.epsilon_dp)} "
                       f"via {ex.mode} ({ex.justification}); k={ex.k}, eta={_number(ex.eta)}"
                       f"{from_clause(ex.eta_from)}"))
    console.print(Text(f"columns read: {', '.join(ex.columns_read) or 'none'}; the transcript's "
                       f"eta once answered: {_number(ex.transcript_eta)}"))
    if ex.model:
        moved = "; ".join(f"{c.change}: {_number(c.level)}" for c in ex.model_checks)
        console.print(Text(f"declared model: {ex.model}; epsilon_dp {_number(ex.epsilon_dp)} "
                           f"against the tight map's {_number(ex.tight_epsilon_dp)}; the "
                           f"answer's level if the model is off: {moved}"))
    console.print("noisy aggregates:")
    items = Table.grid(padding=(0, 1))  # a list with hanging indents: wraps between words at 80
    items.add_column(no_wrap=True)
    items.add_column()
    for a in ex.aggregates:
        items.add_row("-", Text(
            f"{visible(ex.owner(a))}: {a.function}, {a.mechanism.replace('_', ' ')} noise, "
            f"sensitivity {_number(a.sensitivity)}, epsilon_dp {_number(a.epsilon_dp)}, scale "
            f"{_number(a.scale)}, its own 95% error ±{_number(a.ci95_halfwidth)}"))
    console.print(items)
    if ex.errors:
        console.print("expected 95% error of each output:")
        errors = Table.grid(padding=(0, 1))
        errors.add_column(no_wrap=True)
        errors.add_column()
        for e in ex.errors:
            errors.add_row("-", Text(visible(e.describe())))
        console.print(errors)
    console.print(f"cost {_number(ex.cost)}: transcript level {_number(ex.level_before)} -> "
                  f"{_number(ex.level_after)} of budget {_number(ex.budget.total)}: "
                  + ("admissible" if ex.admissible else "would be REFUSED (over budget)")
                  + f"; largest epsilon this query can still ask: {_number(ex.largest_epsilon)}")
    if ex.flattened_sql:
        console.print("flattened SQL (the CTEs and subqueries merged into one SELECT):")
        console.print(Text(visible(ex.flattened_sql)))
    console.print("rewritten SQL:")
    console.print(Text(visible(ex.rewritten_sql)))


def _csv(result: QueryResult) -> str:
    """The answer with, after each noisy column, its 95% half-width ("no interval" where there
    is none) and the interval [low, high] cut to what its statistic can be."""
    frame = result.df.copy()
    bounds = result.bounds(result.ci95)
    for j, (name, possible) in enumerate(zip(result.df.columns, result.ranges(), strict=True)):
        if possible is None:
            continue
        frame[f"{name}_ci95"] = [c if c == c else "no interval" for c in result.ci95[name]]
        ends = [b[j] for b in bounds]
        frame[f"{name}_ci95_low"] = [None if end is None else end[0] for end in ends]
        frame[f"{name}_ci95_high"] = [None if end is None else end[1] for end in ends]
    frame.columns = [csv_text(str(name)) for name in frame.columns]
    return frame.map(csv_text).to_csv(index=False)  # text cells only; numbers stay numbers


def _console() -> Console:
    """The terminal's own width (80 when it cannot be told), so lines wrap between words."""
    from rich.console import Console

    return Console(highlight=False)


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors on stderr with exit 2 (bad input), 3 (budget), 4 (halted)
    or 1 (a bug, whose details are withheld)."""
    try:
        cli.main(args=argv, prog_name="dpsql", standalone_mode=False)
    except DpsqlError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort) as exc:
        # click reports Ctrl-C as Abort from the KeyboardInterrupt (QueryInterrupted: stopped
        # on the data, before any charge); 130 is how shells report an interrupted command.
        interrupt = exc if isinstance(exc, KeyboardInterrupt) else exc.__context__
        if not isinstance(interrupt, KeyboardInterrupt):
            click.echo("error: aborted", err=True)
            sys.exit(2)
        said = str(interrupt) or ("interrupted; nothing was charged unless an answer was printed "
                                  "(dpsql history lists what was)")
        click.echo(f"error: {said}", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except Exception:
        # A bug, not a refusal: its traceback could quote values, so it is never printed.
        click.echo("error: internal error in dpsql (a bug; its details are withheld because they "
                   "could quote data); nothing was charged unless an answer was printed", err=True)
        sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
