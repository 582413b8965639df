"""Render RESULTS.md (and the accuracy plot) from the JSON files the benchmark parts wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.accuracy import EPSILONS, ETAS, KS  # noqa: E402
from benchmarks.machine import machine  # noqa: E402
from benchmarks.spark import section as spark_section
from benchmarks.workload import EPSILON, MAX_ROWS_PER_UNIT, TEMPLATES  # noqa: E402

PLOT = "accuracy_ratio.png"
COMMAND = "python -m benchmarks.run"


def _load(out: Path, name: str):
    path = out / name
    return json.loads(path.read_text()) if path.is_file() else None


def _num(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def _speed_section(out: Path, quick: bool) -> list[str]:
    files = sorted(out.glob("speed_*.json"), key=lambda p: int(p.stem.split("_")[1]))
    lines = ["## Speed: dpsql against plain DuckDB", ""]
    if not files:
        return lines + ["Not measured in this run.", ""]
    part = f"{COMMAND} speed" + (" --quick" if quick else " --sizes " + " ".join(
        p.stem.split("_")[1] for p in files))
    lines += [f"Command: `{part}`", ""]
    for path in files:
        data = json.loads(path.read_text())
        lines += [f"### {data['rows']:,} rows ({data['units']:,} privacy units, "
                  f"{data['heavy_units']:,} with more than {MAX_ROWS_PER_UNIT} rows)", "",
                  "| policy | template | plain ms | dpsql ms | ratio | dpsql peak MB | plain peak MB "
                  "| mean relative error |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in data["results"]:
            lines.append(f"| {r['policy']} | {r['template']} | {r['plain_ms']:.1f} | "
                         f"{r['engine_ms']:.1f} | {r['ratio']:.2f} | {r['engine_peak_mb']:.1f} | "
                         f"{r['plain_peak_mb']:.1f} | {r['relative_error']:.2g} |")
        lines += ["", "Where one grouped COUNT+SUM+AVG query's time goes (mean ms per query, "
                  "cProfile, 10 queries):", "",
                  "| policy | " + " | ".join(next(iter(data["breakdown"].values()))) + " |",
                  "|---|" + "---:|" * len(next(iter(data["breakdown"].values())))]
        for policy, steps in data["breakdown"].items():
            lines.append(f"| {policy} | " + " | ".join(f"{v:.1f}" for v in steps.values()) + " |")
        first = data.get("first_query_ms")
        if first:
            lines += ["", "The times above are for a connection that has answered before. The first "
                      "query on a new connection (COUNT(*)) took " + ", ".join(
                          f"{ms:,.0f} ms under {policy}" for policy, ms in first.items())
                      + "; under per_unit that includes making the bounded copy once (see the "
                      "bounding plan below)."]
        lines.append("")
    return lines


def _findings(out: Path, quick: bool) -> list[str]:
    """Headline figures computed from the stored results: targets met or not, accuracy gain."""
    lines = ["## Headlines", ""]
    for path in sorted(out.glob("speed_*.json"), key=lambda p: int(p.stem.split("_")[1])):
        data = json.loads(path.read_text())
        for policy, target in (("row_level", 1.5), ("per_unit", 3.0)):
            ratios = {r["template"]: r["ratio"] for r in data["results"] if r["policy"] == policy}
            over = sorted(t for t, v in ratios.items() if v > target)
            verdict = "all within" if not over else \
                f"{len(over)} of {len(ratios)} over: {', '.join(over)}"
            lines.append(f"* {data['rows']:,} rows, {policy}: ratio {min(ratios.values()):.2f} to "
                         f"{max(ratios.values()):.2f} (target {target}: {verdict}).")
    lines.append(
        "* Why some templates miss: dpsql has a fixed cost per query (calibration, building and "
        "checking the OpenDP measurements, a synchronous sqlite charge, post-processing: the "
        "breakdown tables below), which is larger than the whole plain query when DuckDB answers "
        "from metadata (COUNT(*) under 1 ms); SUM and AVG also clamp every value, which the plain "
        "query does not do.")
    measured = {int(p.stem.split("_")[1]) for p in out.glob("speed_*.json")}
    if not quick:
        for rows in (10_000_000, 50_000_000):
            if rows not in measured:
                lines.append(f"* {rows:,} rows: not measured in this run.")
    stored = _load(out, "accuracy.json")
    if stored is not None:
        cell = {r["mode"]: r for r in stored["rows"] if r["epsilon"] == 1.0 and r["k"] == 10
                and r["eta"] == 0.001 and r["aggregate"] == "COUNT"}
        lines.append(f"* Accuracy, k = 10, η = 0.001, ε = 1, COUNT: tight calibration's RMSE is "
                     f"{cell['tight']['ratio_to_group']:.3f} of group privacy's measured "
                     f"({cell['tight']['analytic_ratio_to_group']:.3f} analytic), "
                     f"ε_dp {cell['tight']['epsilon_dp']:.3f} against {cell['group']['epsilon_dp']:.3f}.")
    return lines + [""]


def _plan_section(out: Path) -> list[str]:
    plan = _load(out, "plan.json")
    if plan is None:
        return []
    return ["## The bounding plan", "",
            "Bounding is done once per table and connection, not per query: each privacy unit "
            "keeps the (at most) m rows with the smallest keyed hash of its own content (the unit "
            "and every policy column; rowid breaks ties between identical rows), so what a unit "
            "keeps depends only on its own rows (`tests/test_rewrite_bounding.py`). One hash "
            "aggregate finds the units over m, a window ranks only their rows, and the kept rows' "
            "unit and policy columns are copied into an in-memory catalog that DuckDB compresses "
            "on checkpoint (as it does the table on disk), which every later query reads instead "
            "of the base table. When no unit "
            "is over m there is no copy and queries read the table as it is. A per-query plan "
            "(count rows per unit, rank the heavy ones, then aggregate) costs a hash aggregate "
            "over every unit on every query, and an anti join against the dropped rowids costs a "
            "hash probe per row; both measured several times slower than reading the copy.", "",
            f"One-time set-up at {plan['rows']:,} rows: {plan['setup_ms']:,.0f} ms, peak "
            f"{plan.get('setup_peak_mb', float('nan')):,.0f} MB of resident memory above the start, "
            f"{plan['kept_rows']:,} rows kept "
            f"(command: `{plan.get('command', COMMAND + ' speed')}`):", "",
            "```sql", plan["setup_sql"], "```", "",
            f"Rewritten SQL for `{TEMPLATES['grouped_count_sum_avg']}` under per-unit bounding "
            f"(m = {MAX_ROWS_PER_UNIT}), and DuckDB's `EXPLAIN ANALYZE` of it:", "",
            "```sql", plan["sql"], "```", "", "```", plan["profile"].rstrip(), "```", ""]


def _smartnoise_section(out: Path) -> list[str]:
    lines = ["## Side by side with SmartNoise SQL", ""]
    files = sorted(out.glob("smartnoise_*.json"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        return lines + ["Not measured in this run.", ""]
    sizes = " ".join(p.stem.split("_")[1] for p in files)
    lines += [f"Command: `{COMMAND} smartnoise --smartnoise-sizes {sizes}` (after the speed "
              "part, whose dpsql figures it reuses). The script creates "
              "`benchmarks/.venv-smartnoise` and pip-installs smartnoise-sql there (it pins its own "
              "opendp and pandas), exports the table to CSV, and runs `smartnoise_runner.py` in that "
              "environment: `snsql.from_df` over a pandas DataFrame (SmartNoise's pandas reader "
              "runs the SQL in an in-memory SQLite), `Privacy(epsilon=1, delta=1e-6)`, the same "
              "bounds, `max_ids` = m for per_unit (`row_privacy` for row_level), "
              "`censor_dims: false` so every group is kept as in dpsql. Times are medians of the "
              "same number of repetitions after a warm-up; errors use the same measure. dpsql's "
              "per_unit times are for a connection that already holds its bounded copy (made once, "
              "on the first query; its cost is given per size in the speed section); SmartNoise "
              "bounds contributions again on every query.", ""]
    for path in files:
        data = json.loads(path.read_text())
        speed = _load(out, f"speed_{data['rows']}.json")
        ours = {(r["policy"], r["template"]): r for r in (speed or {"results": []})["results"]}
        lines += [f"### {data['rows']:,} rows", ""]
        if "install_error" in data or "run_error" in data:
            lines += [f"SmartNoise SQL could not run: {data.get('install_error') or data['run_error']}", ""]
            continue
        versions = ", ".join(f"{k} {v}" for k, v in data["versions"].items())
        lines += [f"SmartNoise environment: {versions}; CSV load into pandas "
                  f"{data['load_s']:.1f} s (not counted in query times).", "",
                  "| policy | template | dpsql ms | SmartNoise ms | dpsql error | SmartNoise error |",
                  "|---|---|---:|---:|---:|---:|"]
        for key, entry in data["results"].items():
            policy, template = key.split("/")
            mine = ours.get((policy, template))
            mine_ms = f"{mine['engine_ms']:.1f}" if mine else "n/a"
            mine_err = f"{mine['relative_error']:.2g}" if mine else "n/a"
            if "error" in entry:
                lines.append(f"| {policy} | {template} | {mine_ms} | cannot run: "
                             f"{entry['error'][:160]} | {mine_err} | n/a |")
            else:
                lines.append(f"| {policy} | {template} | {mine_ms} | {entry['median_ms']:.1f} | "
                             f"{mine_err} | {entry['relative_error']:.2g} |")
        lines.append("")
    done = {int(p.stem.split("_")[1]) for p in files}
    lines += [f"SmartNoise SQL at {rows:,} rows: not run in this benchmark session (out of time), "
              "so no figure is given." for rows in (1_000_000, 10_000_000) if rows not in done]
    return lines + [""]


def _accuracy_section(out: Path, quick: bool, plot_path: Path) -> list[str]:
    stored = _load(out, "accuracy.json")
    lines = ["## Accuracy at the same guarantee", ""]
    if stored is None:
        return lines + ["Not measured in this run.", ""]
    rows = stored["rows"]
    lines += [f"Command: `{COMMAND} accuracy" + (" --quick" if quick else f" --draws {stored['draws']}")
              + f"` ({stored['draws']} draws per cell through the engine's noise path: plan, "
              "sensitivity, OpenDP mechanism, release; COUNT(*) gets discrete Laplace, SUM(income) "
              "Laplace, on the row-level policy). Ratio = RMSE / group-privacy RMSE at the same "
              "(ε, k, η), measured, with the analytic ratio in brackets; n/a where Theorem 2 cannot "
              "certify ε (ε ≤ ln 2 or no gain).", "",
              f"![accuracy ratio vs eta]({plot_path.name})", ""]
    index = {(r["epsilon"], r["k"], r["eta"], r["aggregate"], r["mode"]): r for r in rows}
    for aggregate in ("COUNT", "SUM"):
        lines += [f"### {aggregate}: RMSE, and RMSE / group RMSE (empirical, analytic)", "",
                  "| ε | k | η | group RMSE | theorem2 RMSE | theorem2 ratio | tight RMSE "
                  "| tight ratio |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for eps in EPSILONS:
            for k in KS:
                for eta in ETAS:
                    g, t2, t = (index[(eps, k, eta, aggregate, m)] for m in ("group", "theorem2", "tight"))
                    lines.append(
                        f"| {eps:g} | {k} | {eta:g} | {_num(g['rmse'], 4)} | {_num(t2['rmse'], 4)} | "
                        f"{_num(t2['ratio_to_group'])} ({_num(t2['analytic_ratio_to_group'])}) | "
                        f"{_num(t['rmse'], 4)} | {_num(t['ratio_to_group'])} "
                        f"({_num(t['analytic_ratio_to_group'])}) |")
        lines.append("")
    plot(rows, plot_path)
    return lines


def plot(rows: list[dict], path: Path) -> None:
    """COUNT RMSE / group RMSE vs eta, one panel per k: tight solid, theorem2 dashed, per epsilon."""
    fig, axes = plt.subplots(1, len(KS), figsize=(4 * len(KS), 3.6), sharey=True)
    for ax, k in zip(axes, KS, strict=True):
        for color, eps in zip(("tab:blue", "tab:orange", "tab:green"), EPSILONS, strict=True):
            for mode, style in (("tight", "-"), ("theorem2", "--")):
                pts = sorted((r["eta"], r["ratio_to_group"], r["analytic_ratio_to_group"]) for r in rows
                             if r["k"] == k and r["epsilon"] == eps and r["mode"] == mode
                             and r["aggregate"] == "COUNT" and r["ratio_to_group"] is not None)
                if pts:
                    etas, emp, ana = zip(*pts, strict=True)
                    ax.plot(etas, ana, style, color=color, label=f"{mode}, ε={eps:g}")
                    ax.plot(etas, emp, "o", color=color, markersize=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"k = {k}")
        ax.set_xlabel("η")
    axes[0].set_ylabel("COUNT RMSE / group-privacy RMSE")
    axes[-1].legend(fontsize=7)
    fig.suptitle("Noise relative to group privacy (lines analytic, dots measured)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _service_section(out: Path) -> list[str]:
    """The service's latency, as `python -m benchmarks.service` stored it (absent if not run)."""
    stored = _load(out, "service.json")
    if stored is None:
        return []
    from benchmarks.service import section

    return section(stored)


def write(out: Path, target: Path, quick: bool, argv: list[str]) -> None:
    """Write the whole results page from whatever parts have been measured."""
    plot_path = target.parent / PLOT
    lines = [
        "# dpsql benchmarks" + (" (quick run)" if quick else ""), "",
        f"Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `{COMMAND} {' '.join(argv)}`, "
        f"from the files in `benchmarks/out{'/quick' if quick else ''}/`.", "",
        f"Machine: {machine()}.", "",
        f"Everything: `{COMMAND} all` (each part can be run alone with the command shown in its "
        "section; `report` rewrites this page from the stored results).", "",
        "## Method", "",
        "* Data: `benchmarks/generate.py` writes table `people` (person_id BIGINT, region VARCHAR "
        "from 50 public values with a Zipf-skewed frequency, age INTEGER in [-5, 110], income "
        "DOUBLE lognormal) into a DuckDB file. Rows per person: 60 % 1, 25 % 2, 15 % 3, and 3 % "
        "of people drawn from a Pareto tail (4 to 2000 rows); rows are shuffled.",
        f"* Policies: `row_level` (each row is one individual) and `per_unit` (privacy unit "
        f"person_id, at most {MAX_ROWS_PER_UNIT} rows per unit). Bounds age [0, 100], income "
        f"[0, 200000]; ε = {EPSILON:g} per query, k = 1, η = 0 (so ε_dp = ε, as SmartNoise gets); "
        "the ledger's budget is never reached.",
        "* Time: each query runs once to warm up, then the engine (`PrivateDatabase.query`, "
        "end to end: parse, plan, calibrate, bind check, DuckDB, ledger charge, noise, "
        "post-processing) and the plain SQL (`execute(sql).fetchall()`) alternate, "
        "each on a connection opened by `engine.backends.duckdb_execute.open_data` (read-only, external access "
        "off, configuration locked), in the same process. Median of the repetitions; "
        "ratio = dpsql median / plain median.",
        "* Memory: peak resident set size above the size before the call, sampled every 2 ms "
        "from /proc/self/statm by a thread (so it counts DuckDB's native memory); the largest "
        "over the repetitions.",
        "* Error: mean over answer cells of |answer − exact| / max(|exact|, 1), where exact is "
        "the plain query without clamping or bounding, so it includes their bias.",
        "",
    ]
    lines += _findings(out, quick)
    lines += _speed_section(out, quick)
    lines += _plan_section(out)
    if not quick:
        lines += _smartnoise_section(out)
        lines += spark_section(out)
    lines += _accuracy_section(out, quick, plot_path)
    lines += _service_section(out)
    target.write_text("\n".join(lines) + "\n" + kept_sections(target))


KEEP_MARKER = "<!-- Sections below are written by their own commands; report keeps them. -->"
"""Line after which RESULTS.md holds sections that `report` does not render (calibration
benchmarks that store no JSON): rewriting the page keeps them verbatim."""


def kept_sections(target: Path) -> str:
    """The existing page's text from KEEP_MARKER on (empty when there is none)."""
    if not target.exists():
        return ""
    text = target.read_text()
    where = text.find(KEEP_MARKER)
    return "" if where < 0 else "\n" + text[where:]
