"""Guarantee maps and their private-side inversion (docs/theory.md §4, §5)."""

import math

import pytest
from dpsql.calibration import MODES, DependenceModel, calibrate, compare_modes, guarantee
from hypothesis import given, settings
from hypothesis import strategies as st

LN2 = math.log(2.0)

models = st.builds(
    DependenceModel,
    k=st.integers(1, 60),
    eta=st.one_of(st.just(0.0), st.just(1.0), st.floats(1e-9, 1.0)),
)
eps_dps = st.floats(1e-6, 20.0)
targets = st.floats(0.01, 10.0)


def applicable(model: DependenceModel) -> tuple[str, ...]:
    return tuple(m for m in MODES if m != "independent" or model.k == 1 or model.eta == 0)


# docs/theory.md §4 reference table: (k, eta) -> {epsilon: (group, theorem2, tight)}, printed digits.
REFERENCE = {
    (2, 0.1): {0.5: (".25", None, ".445"), 1: (".5", ".307", ".870"), 2: ("1", "1.307", "1.649")},
    (5, 0.01): {0.5: (".1", None, ".451"), 1: (".2", ".307", ".794"), 2: (".4", "1.182", "1.203")},
    (10, 0.5): {0.5: (".05", None, ".0795"), 1: (".1", ".1", ".145"), 2: (".2", ".2", ".260")},
    (10, 1e-3): {0.5: (".05", None, ".447"), 1: (".1", ".307", ".665"), 2: (".2", ".821", ".853")},
    (50, 0.01): {
        0.5: (".01", None, ".081"), 1: (".02", ".0982", ".1018"), 2: (".04", ".1182", ".1288")
    },
}


def printed(value: float, digits: str) -> bool:
    """True if value rounds to the printed string (same number of decimals)."""
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return round(value, decimals) == pytest.approx(float(digits), abs=1e-12)


@pytest.mark.parametrize(("k", "eta", "epsilon"), [
    (k, eta, eps) for (k, eta), row in REFERENCE.items() for eps in row
])
def test_reference_table(k: int, eta: float, epsilon: float) -> None:
    group, theorem2, tight = REFERENCE[(k, eta)][epsilon]
    options = {o.mode: o for o in compare_modes(epsilon, DependenceModel(k, eta))}
    assert printed(options["group"].epsilon_dp, group)
    assert printed(options["tight"].epsilon_dp, tight)
    if theorem2 is None:
        assert not options["theorem2"].applies
    else:
        assert printed(options["theorem2"].epsilon_dp, theorem2)


def test_headline_row() -> None:
    cal = calibrate(1.0, DependenceModel(k=10, eta=1e-3))
    assert cal.mode == "tight" and cal.requested_mode == "auto"
    assert cal.epsilon_dp == pytest.approx(0.6653, abs=5e-5)
    assert cal.justification == "proof of Lemma 6 (tight bound)"
    group = calibrate(1.0, DependenceModel(10, 1e-3), "group")
    assert group.epsilon_dp == pytest.approx(0.1)
    assert group.justification == "Proposition 5 (group privacy)"
    assert cal.epsilon_dp / group.epsilon_dp > 6.6


def test_closed_forms() -> None:
    model = DependenceModel(4, 0.2)
    assert guarantee("group", 0.5, model) == 2.0
    b = -math.log(0.2)
    assert guarantee("theorem2", 0.5, model) == pytest.approx(2.0 - min(b, 1.5) + LN2)
    assert guarantee("tight", 0.5, model) == pytest.approx(math.log(0.8 * math.exp(0.5)
                                                                     + 0.2 * math.exp(2.0)))
    assert guarantee("independent", 0.5, DependenceModel(4, 0.0)) == 0.5
    assert guarantee("auto", 0.5, model) == guarantee("tight", 0.5, model)


def test_tight_map_does_not_overflow() -> None:
    level = guarantee("tight", 30.0, DependenceModel(1000, 1e-300))
    assert level == pytest.approx(30_000 + math.log(1e-300), rel=1e-12)


def test_independent_mode_on_independent_models() -> None:
    for model in (DependenceModel.independent(), DependenceModel(5, 0.0)):
        cal = calibrate(0.7, model, "independent")
        assert cal.epsilon_dp == 0.7 and cal.justification == "Proposition 4 (independent records)"
        assert calibrate(0.7, model).mode == "independent"  # ties go to the simpler mode


def test_auto_picks_group_when_eta_is_one() -> None:
    cal = calibrate(2.0, DependenceModel(10, 1.0))
    assert cal.mode == "group" and cal.epsilon_dp == pytest.approx(0.2)


def test_theorem2_certifies_only_above_ln2() -> None:
    model = DependenceModel(10, 1e-3)
    assert calibrate(LN2 + 1e-6, model, "theorem2").epsilon_dp > 0
    options = {o.mode: o for o in compare_modes(LN2, model)}
    assert not options["theorem2"].applies and "ln 2" in options["theorem2"].justification
    assert options["theorem2"].epsilon_dp is None and options["theorem2"].noise_vs_group is None


def test_compare_modes_shape_and_auto_entry() -> None:
    options = compare_modes(1.0, DependenceModel(10, 1e-3))
    assert [o.mode for o in options] == [*MODES, "auto"]
    by_mode = {o.mode: o for o in options}
    assert not by_mode["independent"].applies
    assert "dependent" in by_mode["independent"].justification
    assert by_mode["group"].noise_vs_group == 1.0
    assert by_mode["tight"].noise_vs_group == pytest.approx(0.1 / by_mode["tight"].epsilon_dp)
    assert by_mode["auto"].epsilon_dp == by_mode["tight"].epsilon_dp
    assert "tight" in by_mode["auto"].justification
    cal = calibrate(1.0, DependenceModel(10, 1e-3))
    assert cal.options == options
    assert len(calibrate(1.0, DependenceModel(10, 1e-3), "group").options) == 1


@settings(max_examples=300, deadline=None)
@given(model=models, eps_dp=eps_dps)
def test_tight_is_the_smallest_map(model: DependenceModel, eps_dp: float) -> None:
    tight = guarantee("tight", eps_dp, model)
    slack = 1e-12 * max(1.0, tight)
    assert tight <= guarantee("group", eps_dp, model) + slack
    assert tight <= guarantee("theorem2", eps_dp, model) + slack
    assert tight >= eps_dp - slack  # no map beats independent records


@settings(max_examples=100, deadline=None)
@given(k=st.integers(1, 60), eps_dp=eps_dps)
def test_tight_endpoints(k: int, eps_dp: float) -> None:
    assert guarantee("tight", eps_dp, DependenceModel(k, 0.0)) == eps_dp
    assert guarantee("tight", eps_dp, DependenceModel(k, 1.0)) == k * eps_dp


@settings(max_examples=100, deadline=None)
@given(k=st.integers(1, 10), eps_dp=st.floats(1e-6, 2.0))
def test_tight_is_continuous_at_the_endpoints(k: int, eps_dp: float) -> None:
    # L - eps_dp = ln(1 + eta (e^((k-1) eps_dp) - 1)) <= eta (e^((k-1) eps_dp) - 1)
    eta = 1e-15
    excess = guarantee("tight", eps_dp, DependenceModel(k, eta)) - eps_dp
    assert -1e-15 <= excess <= eta * math.expm1((k - 1) * eps_dp) + 1e-15
    near_one = guarantee("tight", eps_dp, DependenceModel(k, 1 - eta))
    assert near_one == pytest.approx(k * eps_dp, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(model=models, epsilon=targets)
def test_inversion_round_trips_on_the_private_side(model: DependenceModel, epsilon: float) -> None:
    for mode in applicable(model):
        if mode == "theorem2" and epsilon <= LN2:
            continue
        cal = calibrate(epsilon, model, mode)
        assert cal.level == guarantee(mode, cal.epsilon_dp, model)
        assert cal.level <= epsilon
        assert cal.level == pytest.approx(epsilon, abs=1e-9)
        assert cal.epsilon_dp > 0


@settings(max_examples=200, deadline=None)
@given(model=models, low=targets, high=targets)
def test_calibration_is_monotone(model: DependenceModel, low: float, high: float) -> None:
    low, high = sorted((low, high))
    for mode in (*applicable(model), "auto"):
        if mode == "theorem2" and low <= LN2:
            continue
        assert calibrate(low, model, mode).epsilon_dp <= calibrate(high, model, mode).epsilon_dp


@settings(max_examples=200, deadline=None)
@given(model=models, a=eps_dps, b=eps_dps)
def test_maps_are_increasing(model: DependenceModel, a: float, b: float) -> None:
    a, b = sorted((a, b))
    for mode in applicable(model):
        assert guarantee(mode, a, model) <= guarantee(mode, b, model)


@settings(max_examples=200, deadline=None)
@given(model=models, epsilon=targets)
def test_auto_is_the_largest_applicable(model: DependenceModel, epsilon: float) -> None:
    options = compare_modes(epsilon, model)
    best = max(o.epsilon_dp for o in options[:-1] if o.applies)
    assert calibrate(epsilon, model).epsilon_dp == best == options[-1].epsilon_dp


@pytest.mark.parametrize("model", [DependenceModel(10, 1e-3), DependenceModel(4, 0.05),
                                   DependenceModel(2, 1.0)])
def test_theorem2_map_starts_at_ln2(model: DependenceModel) -> None:
    # L(0) = ln 2, not 0: Theorem 2's bound never falls below ln 2 + eps_dp (docs/theory.md §4).
    assert guarantee("theorem2", 0.0, model) == LN2
    b = -math.log(model.eta)
    expected = LN2 + max(1e-9, model.k * 1e-9 - b)
    level = guarantee("theorem2", 1e-9, model)
    assert level == pytest.approx(expected, abs=1e-15) and level > LN2
