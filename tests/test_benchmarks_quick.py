"""Smoke test: the quick benchmark run writes every table the full run does."""

from __future__ import annotations

import re

import pytest

from benchmarks import run
from benchmarks.workload import TEMPLATES


@pytest.fixture(scope="module")
def quick_results() -> str:
    run.main(["all", "--quick"])
    return (run.OUT / "quick" / "RESULTS-quick.md").read_text()


def test_quick_run_times_every_template_under_both_policies(quick_results):
    for template in TEMPLATES:
        assert re.search(rf"\| per_unit \| {template} \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", quick_results)
    rows = re.findall(r"^\| row_level \| (\w+) \|", quick_results, flags=re.M)
    assert set(rows) >= set(TEMPLATES) - {"count_distinct_unit"}
    assert "| policy | template | plain ms | dpsql ms | ratio |" in quick_results


def test_quick_run_has_the_plan_accuracy_tables_and_plot(quick_results):
    assert "ANTI JOIN" in quick_results and "SEMI JOIN" in quick_results
    assert "| 1 | 10 | 0.001 |" in quick_results
    assert "### COUNT" in quick_results and "### SUM" in quick_results
    assert (run.OUT / "quick" / "accuracy_ratio.png").stat().st_size > 10_000
