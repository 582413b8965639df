"""The noise the engine releases has the distribution it claims, and nothing else adds noise.

Goodness of fit at ALPHA = 0.001 on DRAWS = 20,000 draws: a correct sampler fails with
probability 0.001 per test; a sampler whose scale is 25% off is rejected with near certainty
(the same test, against the wrong scale, is required to reject)."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from dpsql.engine import aggregates
from dpsql.engine.noise import build_mechanism, release
from dpsql.engine.plan import Measurement
from dpsql.engine.policy import ColumnSpec
from scipy import stats

ALPHA = 0.001
DRAWS = 20_000
WRONG = 1.25  # a scale this far off must be detected

COUNT = Measurement(aggregates.COUNT, None, "__m0")
FLOAT_SUM = Measurement(aggregates.SUM, ColumnSpec("income", "float", 0.0, 10.0), "__m1")


def _discrete_laplace_pvalue(noise: np.ndarray, scale: float) -> float:
    """Chi-square test of integer noise against the discrete Laplace pmf with this scale.

    pmf(x) = (1 - a) / (1 + a) * a^|x|, a = exp(-1/scale); values with an expected count
    below 5 are pooled into the two tails."""
    a = math.exp(-1 / scale)
    limit = 0
    while DRAWS * (1 - a) / (1 + a) * a ** (limit + 1) >= 5:
        limit += 1
    support = np.arange(-limit, limit + 1)
    pmf = (1 - a) / (1 + a) * a ** np.abs(support)
    tail = (1 - pmf.sum()) / 2
    observed = [np.sum(noise < -limit)] + [np.sum(noise == v) for v in support] + \
        [np.sum(noise > limit)]
    expected = DRAWS * np.concatenate([[tail], pmf, [tail]])
    return stats.chisquare(observed, expected).pvalue


@pytest.mark.parametrize("epsilon", [0.2, 1.0])
def test_discrete_laplace_matches_its_scale(epsilon):
    mechanism = build_mechanism(COUNT, 1, epsilon)
    assert mechanism.mechanism == "discrete_laplace"
    exact = 1234
    noise = np.array(release(mechanism, [exact] * DRAWS)) - exact
    assert noise.dtype.kind == "i"
    assert _discrete_laplace_pvalue(noise, mechanism.scale) > ALPHA
    assert _discrete_laplace_pvalue(noise, mechanism.scale * WRONG) < ALPHA
    assert _discrete_laplace_pvalue(noise, mechanism.scale / WRONG) < ALPHA


@pytest.mark.parametrize("measurement, sensitivity", [(COUNT, 1), (FLOAT_SUM, 10.0)])
def test_single_values_are_released_by_the_scalar_measurement_at_the_same_scale(measurement,
                                                                                sensitivity):
    """A query's one noisy cell goes through OpenDP's measurement of one value: its privacy
    map checked at the share, and its draws (one release each) fit the declared scale and
    reject a scale 25% off, as the vector's do."""
    mechanism = build_mechanism(measurement, sensitivity, 0.5)
    assert mechanism.opendp_scalar is not None
    assert mechanism.opendp_scalar.map(sensitivity) <= 0.5
    exact = 1234
    noise = np.array([release(mechanism, [exact])[0] for _ in range(DRAWS)]) - exact
    if mechanism.mechanism == "discrete_laplace":
        assert noise.dtype.kind == "i"
        pvalue = _discrete_laplace_pvalue
    else:
        def pvalue(noise, scale):
            return stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue
    assert pvalue(noise, mechanism.scale) > ALPHA
    assert pvalue(noise, mechanism.scale * WRONG) < ALPHA
    assert pvalue(noise, mechanism.scale / WRONG) < ALPHA


@pytest.mark.parametrize("epsilon", [0.2, 1.0])
def test_laplace_matches_its_scale(epsilon):
    mechanism = build_mechanism(FLOAT_SUM, 10.0, epsilon)
    assert mechanism.mechanism == "laplace"
    exact = 1234.5
    noise = np.array(release(mechanism, [exact] * DRAWS)) - exact
    assert stats.kstest(noise, stats.laplace(scale=mechanism.scale).cdf).pvalue > ALPHA
    assert stats.kstest(noise, stats.laplace(scale=mechanism.scale * WRONG).cdf).pvalue < ALPHA
    assert stats.kstest(noise, stats.laplace(scale=mechanism.scale / WRONG).cdf).pvalue < ALPHA


def test_scale_is_sensitivity_over_epsilon_and_opendp_agrees():
    for measurement, sensitivity in ((COUNT, 4), (FLOAT_SUM, 20.0)):
        mechanism = build_mechanism(measurement, sensitivity, 0.5)
        assert mechanism.scale == pytest.approx(sensitivity / 0.5, rel=1e-12)
        assert mechanism.opendp_measurement.map(sensitivity) <= 0.5


def test_release_returns_opendp_output_untouched():
    """No arithmetic happens on the noisy values after the sampler: the released list is the
    OpenDP measurement's own output."""
    marker = object()
    for measurement, sensitivity in ((COUNT, 1), (FLOAT_SUM, 10.0)):
        mechanism = build_mechanism(measurement, sensitivity, 1.0)
        seen = []

        def fake(values, seen=seen):
            seen.append(values)
            return [marker]

        def fake_scalar(value, seen=seen):
            seen.append(value)
            return marker

        patched = dataclasses.replace(mechanism, opendp_measurement=fake)
        vars(patched)["opendp_scalar"] = fake_scalar  # the one value's measurement, kept
        released = release(patched, [7, 8])
        assert len(released) == 1 and released[0] is marker
        assert seen == [[7, 8]] or seen == [[7.0, 8.0]]
        released = release(patched, [7])
        assert released == [marker] and released[0] is marker
        assert seen[1:] == [7] or seen[1:] == [7.0]


def test_huge_exact_counts_saturate_instead_of_overflowing():
    mechanism = build_mechanism(COUNT, 1, 1.0)
    released = release(mechanism, [2**70, -(2**70)])
    assert abs(released[0] - 2**62) < 1000 and abs(released[1] + 2**62) < 1000


_FORBIDDEN_MODULES = {"random", "numpy.random"}
# keys, tokens and temporary file names, never noise
SECRETS_ALLOWED = {"engine/accounting/ledger.py", "engine/accounting/analysts.py",
                   "engine/accounting/chain.py",
                   "engine/service/auth.py", "engine/backends/bounded_store.py",
                   "engine/service/pgwire.py"}
PACKAGE_FOLDERS = ("engine", "calibration", "dpsql")


def randomness_uses(root: Path) -> list[str]:
    """Every place under `root`'s package folders (sub-packages included) that imports `random`
    or `numpy.random`, touches `.random`, or imports `secrets` outside SECRETS_ALLOWED."""
    found = []
    for folder in PACKAGE_FOLDERS:
        for source in sorted((root / folder).rglob("*.py")):
            where = source.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
                if isinstance(node, ast.Import):
                    names = {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom):
                    names = {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}
                else:
                    names = set()
                if names & _FORBIDDEN_MODULES:
                    found.append(f"{where}:{node.lineno} imports {sorted(names & _FORBIDDEN_MODULES)}")
                if "secrets" in names and where not in SECRETS_ALLOWED:
                    found.append(f"{where}:{node.lineno} imports secrets")
                if isinstance(node, ast.Attribute) and node.attr == "random":
                    found.append(f"{where}:{node.lineno} uses .random")
    return found


def test_no_engine_module_draws_randomness_outside_opendp():
    """No answer can be produced by adding numpy or Python random floats: no module of the
    engine, the calibration layer or the dpsql package, at any depth, imports `random` or
    `numpy.random` or touches `np.random`; `secrets` only in the ledger, for its row-selection
    key and temporary file names, in the analysts table, for the key tokens are hashed under,
    in the service's auth, for analysts' tokens, in the bounded store, for
    temporary file names, and in the Postgres endpoint, for its cancel keys and comparing names
    in constant time: none is noise."""
    assert randomness_uses(Path(__file__).parent.parent) == []


def test_the_randomness_scan_reaches_sub_packages(tmp_path):
    planted = {"engine/sub/deeper/noise2.py": "import numpy as np\nx = np.random.laplace()\n",
               "calibration/extra/__init__.py": "from random import random\n",
               "dpsql/helper.py": "import secrets\n"}
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = randomness_uses(tmp_path)
    assert [f.split(":")[0] for f in found] == ["engine/sub/deeper/noise2.py", "calibration/extra/__init__.py",
                                                "dpsql/helper.py"]
