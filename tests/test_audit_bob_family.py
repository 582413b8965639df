"""The paper's Example 1 (examples/bob_family.py): plain DP leaks ~10 eps, calibration does not."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bob_family.py"


def load_example():
    spec = importlib.util.spec_from_file_location("bob_family", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


example = load_example()


def test_plain_dp_leaks_nearly_ten_times_epsilon() -> None:
    bob = example.contagious(0.5)
    assert (bob.model.k, bob.model.eta) == (10, 1.0)
    # level = 10 eps - ln(0.999 + 0.001 e^(10 eps)) = 4.862 at eps = 0.5: 9.72 eps
    assert bob.plain.level == pytest.approx(5.0 - math.log(0.999 + 0.001 * math.exp(5.0)))
    assert bob.plain.level / bob.epsilon == pytest.approx(9.72, abs=0.01)
    assert bob.plain.worst_output == ">= 10"


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0])
def test_calibrated_noise_keeps_the_promise(epsilon: float) -> None:
    bob = example.contagious(epsilon)
    assert bob.calibrated_mode == "group" and bob.calibrated_dp == pytest.approx(epsilon / 10)
    assert bob.calibrated.level <= epsilon
    assert bob.plain.level > 3 * epsilon


def test_mild_contagion_needs_less_noise_than_group_privacy() -> None:
    mild = example.mildly_contagious(0.5)
    assert mild.model.k == 10 and 0 < mild.model.eta < 0.05
    assert mild.plain.level > 0.5 >= mild.calibrated.level
    assert mild.calibrated_mode == "tight"
    assert mild.calibrated_dp / mild.group_dp > 4


def test_main_prints_the_story(capsys: pytest.CaptureFixture[str]) -> None:
    example.main()
    out = capsys.readouterr().out
    assert "k = 10, eta = 1.0" in out and "9.72 x the promise" in out
