"""The `dpsql` command line's entry point: `dpsql --version` is answered before anything else is
imported; every other call loads the commands (engine/commands.py) and the engine with them."""

from __future__ import annotations

import gc
import sys

VERSION_ONLY = (["--version"],)


def main(argv: list[str] | None = None) -> None:
    """Run the `dpsql` command (see engine/commands.py `main` for its exit codes)."""
    args = sys.argv[1:] if argv is None else argv
    if args in VERSION_ONLY:
        from .. import __version__

        print(f"dpsql, version {__version__}")  # what click's version option prints
        sys.exit(0)
    if argv is None and "dpsql.engine.commands" not in sys.modules:
        # The process's own command line: the cyclic garbage collector is paused while the
        # commands and the engine are imported and then told to skip what they built
        # (`gc.freeze`): those modules, classes and functions live as long as the process, and
        # every later collection, the ones at exit among them, would walk them again for
        # nothing (issue 26: about a sixth of a one-shot query process's CPU). A caller's
        # argument list (a test running commands in its own process) leaves its collector as is.
        gc.disable()
        try:
            from .commands import main as run
        finally:
            gc.freeze()
            gc.enable()
    else:
        from .commands import main as run
    run(argv)


if __name__ == "__main__":
    main()
