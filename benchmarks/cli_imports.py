"""What a command line process pays before it reads any data: `import dpsql.engine.commands`
(what `dpsql query` imports) against `import duckdb` (what the plain DuckDB process imports),
and `dpsql --version` (the entry point alone) against an interpreter that does nothing, each a
new Python process, without a bytecode cache for the package (as here: PYTHONDONTWRITEBYTECODE=1
and no __pycache__ folders in the checkout, which are removed before each such run) and with
one (as on users' machines). `--compare DIR` also times another checkout of the repository
(e.g. an older commit from `git archive`), alternating, so both are measured on one machine:
its code is imported through a `dpsql/` package of links (`layout`), as setuptools installs it,
since with the checkout's own folders on PYTHONPATH `dpsql.engine` would still be found in the
installed (this) checkout. `import_offenders` is what `python -X importtime` attributes a
process's imports to, by top-level package.

Run: `python -m benchmarks.cli_imports [--repeats 9] [--compare DIR]`. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


CACHE = Path(tempfile.gettempdir()) / "dpsql-bench-pycache"


VERSION = "from dpsql.engine.cli import main; main(['--version'])"


def layout(tree: Path) -> Path:
    """A folder holding a `dpsql/` package of links to `tree`'s files with its engine/ and
    calibration/ inside, as setuptools installs them; put on PYTHONPATH, it is imported instead
    of the installed checkout (by a process not started in a checkout: `-c` puts the current
folder first)."""
    root = Path(tempfile.mkdtemp(prefix="dpsql-layout-"))
    atexit.register(shutil.rmtree, root, True)
    package = root / "dpsql"
    package.mkdir()
    for path in (tree / "dpsql").glob("*.py"):
        (package / path.name).symlink_to(path.resolve())
    for folder in ("engine", "calibration"):
        (package / folder).symlink_to((tree / folder).resolve(), target_is_directory=True)
    return root


def environment(tree: Path | None, bytecode: bool) -> dict[str, str]:
    """The environment of a timed process importing `tree` (a `layout`; the installed checkout if
    None). With `bytecode` the compiled modules are kept under CACHE (PYTHONPYCACHEPREFIX), so
    the checkout's own __pycache__ folders stay absent, as this environment leaves them."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(CACHE)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        drop_bytecode((tree / "dpsql" / "engine").resolve().parent if tree is not None else HERE)
    return env


PACKAGES = {"_duckdb": "duckdb", "sqlglotrs": "sqlglot", "_yaml": "yaml"}
"""Extension modules counted with the package they belong to."""


def import_offenders(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Milliseconds of import time (`python -X importtime`, each module's own) per top-level
    package in one run of `command` (a Python command line without the interpreter)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *command], env=env, check=True,
                          cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    spent: collections.Counter[str] = collections.Counter()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        top = name.strip().split(".")[0]
        spent[PACKAGES.get(top, top)] += int(own) / 1000
    return dict(spent)


def _seconds(code: str, tree: Path | None, bytecode: bool) -> float:
    """Wall seconds of a new interpreter running `code` from `tree` (a `layout`; the installed
    checkout if None)."""
    env = environment(tree, bytecode)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd="/",
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def drop_bytecode(tree: Path) -> None:
    """Remove the compiled modules of a checkout's own packages (build artefacts, gitignored)."""
    for package in ("dpsql", "engine", "calibration"):
        for folder in (tree / package).rglob("__pycache__"):
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--compare", type=Path, default=None,
                        help="another checkout whose commands are timed alongside")
    args = parser.parse_args()
    cases = {"python -c pass": ("pass", None, True),
             "import duckdb": ("import duckdb", None, True)}
    trees = [("this checkout", HERE, None)] + ([("--compare", args.compare, layout(args.compare))]
                                               if args.compare else [])
    for label, tree, linked in trees:
        for bytecode in (False, True):
            cache = "bytecode cached" if bytecode else "no bytecode cache"
            module = "dpsql.engine.commands" if (tree / "engine" / "commands.py").is_file() \
                else "dpsql.engine.cli"
            cases[f"import {module}, {label}, {cache}"] = (f"import {module}", linked, bytecode)
        cases[f"dpsql --version, {label}"] = (VERSION, linked, True)
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
