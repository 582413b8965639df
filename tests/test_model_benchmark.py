"""The model-exact benchmark prints the measured rows, and rewriting RESULTS.md keeps its section."""

from pathlib import Path

from benchmarks import model_exact, report


def test_household_rows_reproduce_the_audited_numbers() -> None:
    rows = "\n".join(model_exact.households(1.0))
    assert "| households of 10, rho 0.3 | 0.1 | 0.1988 | 0.4659 | 2.34x less |" in rows
    assert "| households of 50, rho [0.2, 0.4] | 0.02 | 0.03315 | 0.08912 |" in rows


def test_misdeclared_rho_rows_show_the_level_rising_past_epsilon() -> None:
    rows = model_exact.misdeclared(1.0)
    assert rows[2].startswith("| rho 0.3 (eps_dp 0.4659) | 0.437 |") and "| 1.000 | 1.369 |" in rows[2]


def test_report_keeps_sections_after_the_marker(tmp_path: Path) -> None:
    page = tmp_path / "RESULTS.md"
    page.write_text("# old\n\nold body\n\n" + report.KEEP_MARKER + "\n\n## Kept\n\nrow\n")
    kept = report.kept_sections(page)
    assert kept.startswith("\n" + report.KEEP_MARKER) and kept.endswith("## Kept\n\nrow\n")
    assert "old body" not in kept
    page.write_text("# no marker\n")
    assert report.kept_sections(page) == ""
    assert report.kept_sections(tmp_path / "missing.md") == ""


def test_the_stored_results_page_holds_the_section() -> None:
    page = Path(report.__file__).resolve().parent / "RESULTS.md"
    assert "## Model-exact calibration" in report.kept_sections(page)
