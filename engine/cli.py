"""The `dpsql` command line's entry point: `dpsql --version` is answered before anything else is
imported; every other call loads the commands (engine/commands.py) and the engine with them."""

from __future__ import annotations

import sys

VERSION_ONLY = (["--version"],)


def main(argv: list[str] | None = None) -> None:
    """Run the `dpsql` command (see engine/commands.py `main` for its exit codes)."""
    args = sys.argv[1:] if argv is None else argv
    if args in VERSION_ONLY:
        from .. import __version__

        print(f"dpsql, version {__version__}")  # what click's version option prints
        sys.exit(0)
    from .commands import main as run

    run(argv)


if __name__ == "__main__":
    main()
