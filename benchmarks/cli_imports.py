"""What a command line process pays before it reads any data: `import dpsql.engine.cli` (what
`dpsql query` imports) against `import duckdb` (what the plain DuckDB process imports), each a
new Python process, without a bytecode cache (as here: PYTHONDONTWRITEBYTECODE=1) and with one
(as on users' machines). `--compare DIR` also times another checkout of the repository (e.g. an
older commit from `git archive`), alternating, so the two are measured on the same machine.

Run: `python -m benchmarks.cli_imports [--repeats 9] [--compare DIR]`. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _seconds(module: str, tree: Path | None, bytecode: bool) -> float:
    """Wall seconds of a new interpreter importing `module` from `tree` (the installed one if
    None)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True, cwd="/")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--compare", type=Path, default=None,
                        help="another checkout whose `dpsql.engine.cli` is timed alongside")
    args = parser.parse_args()
    cases = {"import duckdb": ("duckdb", None, True)}
    trees = [("this checkout", HERE)] + ([("--compare", args.compare)] if args.compare else [])
    for label, tree in trees:
        for bytecode in (False, True):
            cache = "bytecode cached" if bytecode else "no bytecode cache"
            cases[f"import dpsql.engine.cli, {label}, {cache}"] = ("dpsql.engine.cli", tree, bytecode)
    for module, tree, _ in cases.values():
        _seconds(module, tree, True)  # writes the bytecode the cached cases read
    times: dict[str, list[float]] = {name: [] for name in cases}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeats):  # every case once per round, so all see the same machine
        for name, case in cases.items():
            times[name].append(_seconds(*case))
    loads.append(os.getloadavg()[0])
    compared = f" --compare {args.compare}" if args.compare else ""
    print(f"Command: `python -m benchmarks.cli_imports --repeats {args.repeats}{compared}` "
          f"(load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores)\n")
    print("| process | median s |")
    print("|---|---:|")
    for name, spent in times.items():
        print(f"| {name} | {statistics.median(spent):.2f} |")


if __name__ == "__main__":
    main()
