"""The DuckDB releases the project admits, read from pyproject.toml, and the tests CI runs again
under the lowest one (`python -m tests.duckdb_releases lowest|newest|tests`)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every test whose verdicts depend on how DuckDB binds SQL.
RELEASE_SENSITIVE = ("tests/test_oracle.py", "tests/test_dates.py", "tests/test_attacks.py",
                     "tests/test_physical_types.py", "tests/test_whitelist.py")


def lowest() -> str:
    """The lower bound of pyproject.toml's duckdb requirement (`duckdb>=X,...`)."""
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [r for r in requirements if re.match(r"duckdb\b", r)]
    match = re.search(r">=\s*([\d.]+)", spec)
    if match is None:
        raise SystemExit(f"pyproject.toml's duckdb requirement has no lower bound: {spec}")
    return match.group(1)


def newest() -> str:
    """The release requirements.lock pins."""
    (pin,) = [line for line in (ROOT / "requirements.lock").read_text().splitlines()
              if line.startswith("duckdb==")]
    return pin.split("==")[1]


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "lowest":
        print(lowest())
    elif what == "newest":
        print(newest())
    elif what == "tests":
        print(" ".join(RELEASE_SENSITIVE))
    else:
        raise SystemExit("usage: python -m tests.duckdb_releases lowest|newest|tests")
