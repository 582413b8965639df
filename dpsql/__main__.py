"""`python -m dpsql`: the command line."""

from .engine.cli import main

main()
