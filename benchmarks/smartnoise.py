"""SmartNoise SQL on the benchmark data: installed in its own environment, run as a subprocess."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import duckdb

from benchmarks.generate import DATA_DIR, Dataset
from benchmarks.speed import cells, relative_error
from benchmarks.workload import (
    AGE_BOUNDS,
    EPSILON,
    INCOME_BOUNDS,
    MAX_ROWS_PER_UNIT,
    POLICIES,
    TEMPLATES,
    UNIT,
    applies,
)

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-smartnoise"
PYTHON = VENV / "bin" / "python"
RUNNER = HERE / "smartnoise_runner.py"
DELTA = 1e-6
TIMEOUT_S = 3 * 3600


def ensure_environment() -> str | None:
    """Create the environment and install smartnoise-sql if needed; the error text if it fails."""
    if PYTHON.is_file():
        return None
    for command in ([sys.executable, "-m", "venv", str(VENV)],
                    [str(PYTHON), "-m", "pip", "install", "-q", "smartnoise-sql"]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return f"{' '.join(command[-3:])} failed: {done.stderr.strip()[-600:]}"
    return None


def versions() -> dict[str, str]:
    """Installed versions of SmartNoise SQL and the libraries it pins."""
    done = subprocess.run([str(PYTHON), "-m", "pip", "list", "--format", "json"],
                          capture_output=True, text=True, check=True)
    wanted = {"smartnoise-sql", "opendp", "pandas", "sqlalchemy"}
    return {p["name"]: p["version"] for p in json.loads(done.stdout) if p["name"].lower() in wanted}


def export_csv(data: Dataset) -> Path:
    """The table as CSV (SmartNoise's pandas reader loads a DataFrame)."""
    path = DATA_DIR / f"{data.path.stem}.csv"
    if not path.is_file():
        with duckdb.connect(str(data.path), read_only=True) as conn:
            conn.execute(f"COPY people TO '{path}' (HEADER)")
    return path


def compare(data: Dataset, reps: int) -> dict:
    """SmartNoise's median time and relative error per policy and template, or why it failed."""
    failure = ensure_environment()
    if failure is not None:
        return {"rows": data.rows, "install_error": failure}
    args = {
        "csv": str(export_csv(data)), "epsilon": EPSILON, "delta": DELTA, "reps": reps,
        "templates": {p: {t: sql for t, sql in TEMPLATES.items() if applies(t, p)} for p in POLICIES},
        "policies": {
            "row_level": {"unit": None, "max_ids": 1, "age": AGE_BOUNDS, "income": INCOME_BOUNDS},
            "per_unit": {"unit": UNIT, "max_ids": MAX_ROWS_PER_UNIT, "age": AGE_BOUNDS,
                         "income": INCOME_BOUNDS},
        },
    }
    try:
        done = subprocess.run([str(PYTHON), str(RUNNER), json.dumps(args)], capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"rows": data.rows, "run_error": f"did not finish within {TIMEOUT_S} s"}
    if done.returncode != 0:
        return {"rows": data.rows, "run_error": done.stderr.strip()[-600:]}
    raw = json.loads(done.stdout)
    with duckdb.connect(str(data.path), read_only=True) as conn:
        exact = {t: cells(conn.execute(sql).fetchall(), "GROUP BY" in sql)
                 for t, sql in TEMPLATES.items()}
    results = {}
    for policy, per_template in raw["results"].items():
        for template, outcome in per_template.items():
            grouped = "GROUP BY" in TEMPLATES[template]
            entry = {"error": outcome["error"]} if "error" in outcome else {
                "median_ms": outcome["median_ms"],
                "relative_error": statistics.fmean(
                    relative_error(cells([tuple(r) for r in answer], grouped), exact[template])
                    for answer in outcome["answers"]),
            }
            results[f"{policy}/{template}"] = entry
    return {"rows": data.rows, "load_s": raw["load_s"], "versions": versions(), "delta": DELTA,
            "results": results}
