"""docs/choosing_k_eta.md shows numbers the code produces."""

from pathlib import Path

import pytest

from calibration import DependenceModel, calibrate
from calibration.table import markdown_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "choosing_k_eta.md"


def test_table_is_the_generated_one() -> None:
    assert markdown_table() in DOC.read_text()


def test_household_snippet() -> None:
    model = DependenceModel.household(4, 0.3, [0.9, 0.1])
    assert model.eta == pytest.approx(0.1663, abs=5e-5)
    cal = calibrate(1.0, model)
    assert cal.mode == "tight" and cal.epsilon_dp == pytest.approx(0.518, abs=5e-4)
    assert calibrate(1.0, model, "group").epsilon_dp == 0.25
