"""`dpsql query --file` and `dpsql explain --file`: a workload file answered or explained
together, printed as JSON or as one table per statement."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .database import PrivateDatabase
from .display import number, visible
from .errors import InputError
from .service.client import Service
from .workload import split_statements
from .workload_result import ADMITTED_LIMIT, WorkloadExplanation, WorkloadResult


def run_workload(path: str, sql: str | None, db: str | None, engine: str, policy: str | None,
                 ledger: str | None, epsilon: float | None, cost: float | None, mode: str | None,
                 analyst: str, fmt: str, service: Service | None, explain: bool) -> None:
    """Read the file, answer (or explain) its statements together, on local data or by the
    service asked with --server, and print the result."""
    if sql is not None:
        raise InputError("give either SQL or --file, not both")
    if fmt == "csv":
        raise InputError("a workload is printed as table or json (one answer per statement), "
                         "not csv")
    shown: WorkloadExplanation | WorkloadResult
    if service is not None:
        statements = split_statements(_read(path))
        with service.client() as client:
            shown = client.explain_many(statements, epsilon=epsilon, mode=mode, cost=cost) \
                if explain else client.query_many(statements, epsilon=epsilon, mode=mode, cost=cost)
    else:
        db, policy, ledger = _local(db, policy, ledger, "a workload")
        statements = split_statements(_read(path))
        with PrivateDatabase.connect(db, policy=policy, ledger=ledger, analyst=analyst,
                                     engine=engine) as private:
            shown = private.explain_many(statements, epsilon=epsilon, mode=mode, cost=cost) \
                if explain else private.query_many(statements, epsilon=epsilon, mode=mode, cost=cost)
    if fmt == "json":
        click.echo(json.dumps(shown.to_dict(), allow_nan=False))
    elif isinstance(shown, WorkloadResult):
        _print_result(shown)
    else:
        _print_explanation(shown)


def epsilon_by_accuracy(path: str | None, sql: str | None, db: str | None, engine: str,
                        policy: str | None, ledger: str | None, epsilon: float | None,
                        cost: float | None, mode: str | None, analyst: str,
                        service: Service | None, ci95: float, confirm: bool) -> float:
    """The epsilon `--ci95` asks for a query or a workload file (found by the service, with
    --server), said on stderr; with `confirm`, the user must agree before it is spent
    (click.Abort otherwise)."""
    if epsilon is not None or cost is not None:
        raise InputError("give --ci95, --epsilon or --cost: exactly one of them")
    local = None if service is not None else _local(db, policy, ledger, "--ci95")
    if (path is None) == (sql is None):
        raise InputError("give either SQL or --file, exactly one of them")
    asked: str | list[str] = sql if sql is not None else split_statements(_read(path))
    if local is None:
        assert service is not None
        with service.client() as client:
            plan = client.epsilon_for(asked, ci95, mode)
    else:
        with PrivateDatabase.connect(local[0], policy=local[1], ledger=local[2], analyst=analyst,
                                     engine=engine) as private:
            plan = private.epsilon_for(asked, ci95, mode)
    click.echo(f"{plan.explanation}; the widest 95% half-width is then "
               f"±{number(plan.halfwidth)}", err=True)
    if confirm:
        click.confirm(f"spend epsilon {plan.epsilon:g}?", abort=True, err=True)
    return plan.epsilon


def _local(db: str | None, policy: str | None, ledger: str | None,
           what: str) -> tuple[str, str, str]:
    """The local data options, all three given, or a one-line refusal naming those missing."""
    if db is None or policy is None or ledger is None:
        missing = [name for name, value in (("--db", db), ("--policy", policy),
                                            ("--ledger", ledger)) if value is None]
        raise InputError(f"missing option {', '.join(missing)}: {what} needs --db, --policy "
                         "and --ledger")
    return db, policy, ledger


def _read(path: str | None) -> str:
    assert path is not None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read workload file {path}: {exc}") from None


def _print_result(result: WorkloadResult) -> None:
    print_stored(result.to_dict())
    click.echo(f"answer id {result.id}")


def print_stored(stored: dict) -> None:
    """A workload's answers in their JSON form (fresh, or as the ledger stored them)."""
    for answer in stored["answers"]:
        click.echo(visible(answer["sql"]))
        click.echo(f"  ({answer['answered']}; ± is the 95% interval half-width of the noise)")
        click.echo("  " + " | ".join(visible(str(c)) for c in answer["columns"]))
        for row, ci in zip(answer["rows"], answer["ci95"], strict=True):
            click.echo("  " + " | ".join(
                visible(str(v)) if c is None else f"{number(v)} ± {number(c)}"
                for v, c in zip(row, ci, strict=True)))
    click.echo(_cost_line(stored["epsilon"], stored["epsilon_dp"], stored["k"], stored["eta"],
                          stored["cost"], stored["transcript_level_before"],
                          stored["transcript_level_after"]))
    if stored["strategy"]:
        click.echo(f"strategy: {stored['strategy']}; sensitivity {number(stored['sensitivity'])}")


def _print_explanation(ex: WorkloadExplanation) -> None:
    click.echo(f"strategy: {ex.strategy or 'none (every statement is answered alone)'}")
    for name, rmse in ex.candidates:
        click.echo(f"  candidate {name}: per-cell RMSE {number(rmse)} × cell sensitivity / ε_dp")
    click.echo("expected per-cell RMSE, in the workload vs asked separately at epsilon / "
               f"{len(ex.errors)}:")
    for e in ex.errors:
        click.echo(f"  {number(e.rmse_workload)} vs {number(e.rmse_separate)}  {visible(e.sql)} "
                   f"({e.answered})")
    click.echo(_cost_line(ex.epsilon, ex.epsilon_dp, ex.k, ex.eta, ex.cost, ex.level_before,
                          ex.level_after))
    if not ex.admissible:
        click.echo("over budget: the ledger would refuse this workload")
    else:
        more = f"{ex.admitted} or more" if ex.admitted >= ADMITTED_LIMIT else str(ex.admitted)
        click.echo(f"the budget left admits {more} such workload{'s' if ex.admitted > 1 else ''} "
                   "(this one included)")


def _cost_line(epsilon: float, epsilon_dp: float, k: int, eta: float, cost: float,
               before: float, after: float) -> str:
    return (f"epsilon {number(epsilon)} for the whole workload (k={k}, eta={number(eta)}) -> "
            f"epsilon_dp {number(epsilon_dp)}, charged once; cost {number(cost)} (transcript "
            f"level {number(before)} -> {number(after)})")
