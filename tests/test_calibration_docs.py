"""docs/choosing_k_eta.md shows numbers the code produces; docs/theory.md names real tests."""

import re
from pathlib import Path

import pytest
from dpsql.calibration import DependenceModel, calibrate
from dpsql.calibration.table import markdown_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "choosing_k_eta.md"


def test_table_is_the_generated_one() -> None:
    assert markdown_table() in DOC.read_text()


def test_household_snippet() -> None:
    model = DependenceModel.household(4, 0.3, [0.9, 0.1])
    assert model.eta == pytest.approx(0.1663, abs=5e-5)
    cal = calibrate(1.0, model)
    assert cal.mode == "tight" and cal.epsilon_dp == pytest.approx(0.518, abs=5e-4)
    assert calibrate(1.0, model, "group").epsilon_dp == 0.25


PAGE = Path(__file__).resolve().parents[1] / "docs" / "theory.md"
ROOT = PAGE.parents[1]


def test_every_test_named_in_theory_md_exists() -> None:
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", PAGE.read_text())
    assert len(named) > 40
    for path, name in named:
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"{path}::{name} is missing"


def test_theory_md_names_the_paper_and_nothing_cites_a_missing_theory_file() -> None:
    text = " ".join(PAGE.read_text().split())
    assert "Statistical Disclosure Control via Information Theory" in text
    assert "Wu, Xianyao Xia and Yeping He" in text
    stale = [
        str(path.relative_to(ROOT))
        for pattern in ("*.py", "*.md")
        for path in ROOT.rglob(pattern)
        if ".venv" not in path.parts and path != Path(__file__).resolve()
        and "THEORY" in path.read_text(errors="ignore")
    ]
    assert stale == []
