"""The `dpsql` command group: the analyst's commands (engine/commands_analyst.py) and the data
owner's (engine/commands_owner.py) under one name, and the one table from an error to the exit
code a shell sees (engine/cli.py is the entry point that loads them)."""

from __future__ import annotations

import sys

import click

from .. import __version__
from .commands_analyst import explain, history, query, report_command
from .commands_owner import (
    analyst_group,
    calibrate,
    dependence_group,
    init,
    ledger_group,
    prepare,
    serve,
)
from .errors import BudgetExhausted, DpsqlError, EngineHalted

# rich, the owner's dependence tools and the report renderers are imported by the commands that
# use them, so a `dpsql query --format json` process does not load them (measured start-up cost:
# benchmarks/RESULTS.md, "A CLI call").


@click.group(help="Differentially private SQL for dependent records.")
@click.version_option(__version__, prog_name="dpsql")
def cli() -> None:
    """Command group."""


for _command in (query, explain, history, report_command, init, ledger_group, prepare, analyst_group,
                 serve, calibrate, dependence_group):
    cli.add_command(_command)

EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (BudgetExhausted, 3),  # over budget: a smaller epsilon, or a new budget, may pass
    (EngineHalted, 4),  # halted until the owner has inspected why
    (DpsqlError, 2),  # bad input or a refused query; nothing was charged
    (click.ClickException, 2),  # a bad option or argument
    (click.exceptions.Abort, 2),  # a prompt aborted
    (KeyboardInterrupt, 130),  # 128 + SIGINT, as shells report an interrupted command
    (Exception, 1),  # a bug, whose details are withheld
)
"""The exit code of each error reaching the command line: the first row the error is an
instance of."""


def exit_code(error: BaseException) -> int:
    """The exit code `error` ends the `dpsql` process with (EXIT_CODES)."""
    return next(code for kind, code in EXIT_CODES if isinstance(error, kind))


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors on stderr with exit 2 (bad input), 3 (budget), 4 (halted)
    or 1 (a bug, whose details are withheld)."""
    try:
        cli.main(args=argv, prog_name="dpsql", standalone_mode=False)
    except DpsqlError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exit_code(exc))
    except (KeyboardInterrupt, click.exceptions.Abort) as exc:
        # click reports Ctrl-C as Abort from the KeyboardInterrupt (QueryInterrupted: stopped
        # on the data, before any charge); 130 is how shells report an interrupted command.
        interrupt = exc if isinstance(exc, KeyboardInterrupt) else exc.__context__
        if not isinstance(interrupt, KeyboardInterrupt):
            click.echo("error: aborted", err=True)
            sys.exit(exit_code(exc))
        said = str(interrupt) or ("interrupted; nothing was charged unless an answer was printed "
                                  "(dpsql history lists what was)")
        click.echo(f"error: {said}", err=True)
        sys.exit(exit_code(interrupt))
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exit_code(exc))
    except Exception as exc:
        # A bug, not a refusal: its traceback could quote values, so it is never printed.
        click.echo("error: internal error in dpsql (a bug; its details are withheld because they "
                   "could quote data); nothing was charged unless an answer was printed", err=True)
        sys.exit(exit_code(exc))
    sys.exit(0)


if __name__ == "__main__":
    main()
