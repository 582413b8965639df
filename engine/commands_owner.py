"""The data owner's commands: init (a starter policy), ledger, prepare, analyst, serve,
calibrate and dependence; they read the policy, the ledger and the private data, never an
analyst's token."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, replace

import click

from ..calibration import CalibrationError, DependenceModel, compare_modes
from .accounting import chain
from .accounting.analysts import ROLES
from .accounting.ledger import Ledger, open_read_only
from .accounting.ledger_binding import binding_of
from .backends.duckdb import DuckDBBackend
from .commands_output import terminal
from .display import number as _number
from .display import visible
from .errors import DpsqlError, InputError, LedgerError, PolicyError
from .policy_yaml import load_policy
from .progress_bar import progress_bar
from .service.auth import check_cap, check_name, new_analyst
from .service.limits import Limits


@click.command(name="init", help="Owner: write a starter policy from a data file's schema alone "
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


@click.group(name="ledger", help="Create, resume and verify budget ledgers (the data owner's act).")
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


@click.command(help="Owner: bound every table with a privacy unit once and keep the kept rows beside "
             "the ledger, so later queries skip that step (a table without one: every row, "
             "with each bounded number's clamped value stored); redo it after the data, the policy's "
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
            copies = DuckDBBackend.prepare_copies(db, policy, path, book.hash_key)
    finally:
        book.close()
    table = Table(title=f"Bounded copies for {path}")
    for name in ("table", "rows kept", "on disk", "seconds", "file"):
        table.add_column(name)
    for c in copies:
        table.add_row(Text(visible(c.table)), f"{c.rows:,}", f"{c.bytes / 2**20:,.1f} MB",
                      f"{c.seconds:.2f}", Text(visible(str(c.path))))
    terminal().print(table if copies else "no table has a privacy unit or a bounded numeric "
                     "column: nothing to prepare")


@ledger_group.command(name="verify", help="Check a ledger's hash chain and re-derive each "
                      "charge's cost from its record: exit 0 and one line with the number of "
                      "records and the head link (keep both elsewhere: deleting the last records "
                      "is only found against them), exit 2 and one line naming the first bad record.")
@click.option("--ledger", "path", required=True, help="The sqlite ledger to check (read only).")
@click.option("--kept", default=None, metavar="N:HEAD",
              help="A record count and head link an earlier verify printed, kept elsewhere: the "
                   "chain must pass through them (finds deleted last records and a rewritten chain).")
def ledger_verify(path, kept) -> None:
    from pathlib import Path

    count, _, head = (kept or "").partition(":")
    if kept is not None and not (count.isdigit() and len(head) == 64
                                 and all(c in "0123456789abcdefABCDEF" for c in head)):
        raise InputError(f"--kept {kept!r} is not N:HEAD (a record count, a colon and the "
                         "64-hex-digit head link that dpsql ledger verify printed)")
    conn = open_read_only(Path(path), "verify")
    try:
        report = chain.verify(conn, None if kept is None else (int(count), head))
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read ledger {path} as a dpsql ledger: {exc}") from None
    finally:
        conn.close()
    if report.problem is not None:
        where = "" if report.bad_id is None else f"record {report.bad_id}: "
        click.echo(visible(f"ledger {path}: {where}{report.problem} "
                           f"({report.records} records before it verified)"))
        raise SystemExit(2)
    click.echo(visible(f"ledger {path}: {report.records} records verified; head link "
                       f"{report.records}:{report.head}"))


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
    terminal().print(Text(visible(f"halted at {reason}; queries may run again")))


@click.group(name="analyst", help="Manage who may ask a dpsql service (the data owner's act): "
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
    terminal().print(table)


@analyst_group.command(name="revoke", help="Revoke an analyst's token at once (their answers stay "
                       "recorded; a revoked name is never reused).")
@click.argument("name")
@click.option("--ledger", "path", required=True, help="The sqlite ledger the service uses.")
def analyst_revoke(name, path) -> None:
    from rich.text import Text

    with Ledger.reopen(path) as book:
        analyst = book.update_analyst(name, revoke=True)
    terminal().print(Text(visible(f"revoked {analyst.name!r} at {analyst.revoked}")))


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
    terminal().print(Text(visible(f"cap of {analyst.name!r}: "
                                  + ("none" if analyst.cap is None else f"{analyst.cap:g}"))))


@click.command(help="Serve analysts over HTTP (and the Postgres protocol with --pg-port): the data and "
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
@click.option("--reuse/--no-reuse", default=True, show_default=True,
              help="Answer an analyst's query that is post-processing of their own released "
              "answers (asked again, a marginal, total or kept groups) from them at no charge, "
              "when at least as accurate; --no-reuse charges every query unless a request asks "
              "reuse.")
def serve(db, policy_path, ledger, host, port, tls_cert, tls_key, rate, burst, trusted_proxies,
          pg_port, reuse) -> None:
    from .service.server import serve as run_server  # uvicorn and FastAPI load only to serve

    run_server(db, policy_path, ledger, host, port, tls_cert, tls_key,
               replace(Limits(), rate=rate, burst=burst), tuple(trusted_proxies), pg_port=pg_port,
               reuse=reuse)


@click.command(help="Show epsilon_dp and noise relative to group privacy for every mode.")
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
    terminal().print(table)


OWNER_SIDE = ("OWNER-SIDE: its output is computed from the private data and is for the data "
              "owner only; never show it to analysts.")


@click.group(name="dependence", help="Data owner's tools for the dependence model: check k against "
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
    from .backends.duckdb_execute import open_data
    from .chain_check import check_chain
    from .dependence_data import check_groups, open_owner_data
    from .dependence_report import print_chain_checks, print_checks

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
            print_checks(terminal(), checks)
        if chain_checks:
            print_chain_checks(terminal(), chain_checks)
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
        print_report(terminal(), report)
