"""examples/meters.py declares the chain its generator uses, and README.md quotes what it prints."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest
from dpsql.calibration.model_markov import chain_eta
from dpsql.engine.policy_yaml import parse_policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "meters.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("meters_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_policies_declare_what_the_generator_implies(example) -> None:
    model = parse_policy(example.record_policy(10.0))
    assert model.k == example.DAYS
    assert chain_eta(example.CHAIN, example.DAYS) <= model.eta < chain_eta(example.CHAIN,
                                                                           example.DAYS) + 1e-4
    declared = model.models[0].chain
    assert declared == example.CHAIN


def test_the_generator_follows_the_declared_chain(example, tmp_path) -> None:
    """Transition frequencies of the generated data are within 4 standard errors of the chain."""
    example.generate(tmp_path / "r.duckdb", meters=2000)
    with duckdb.connect(str(tmp_path / "r.duckdb")) as conn:
        pairs = conn.execute(
            'SELECT a."on", b."on", COUNT(*) FROM readings a JOIN readings b ON a.meter = b.meter '
            'AND b.day = a.day + 1 GROUP BY ALL').fetchall()
    counts = {(bool(a), bool(b)): n for a, b, n in pairs}
    for today, chance in ((False, example.UP), (True, 1 - example.DOWN)):
        total = counts[(today, False)] + counts[(today, True)]
        seen = counts[(today, True)] / total
        assert abs(seen - chance) < 4 * np.sqrt(chance * (1 - chance) / total)


def test_readme_quotes_the_example_output(tmp_path) -> None:
    run = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Model-exact calibration"):]
    quoted = re.search(r"```\n(noise scale of each daily count.*?)```", section, re.S).group(1)
    assert quoted in run.stdout
    scales = {name.strip(): float(v) for name, v in
              re.findall(r"^  (.+?)\s+([0-9.]+)$", quoted, re.M)}
    assert scales["tight map"] / scales["model, cap 10"] == pytest.approx(10.0, rel=1e-3)
    assert "10 times less noise" in section and \
        f"{scales['tight map'] / scales['model, cap 1000']:.0f} times less" in section


def test_readme_quotes_the_whole_series_output(tmp_path) -> None:
    """The count over all days: the README's block is what the example prints, and the model
    gives less noise than the tight map by the factor it states."""
    run = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True)
    section = (ROOT / "README.md").read_text()
    section = section[section.index("## Model-exact calibration"):]
    quoted = re.search(r"```\n(noise scale of the count of readings on.*?)```", section,
                       re.S).group(1)
    assert quoted in run.stdout
    scales = {name.strip(): float(v) for name, v in
              re.findall(r"^  (.+?)\s+([0-9.]+)$", quoted, re.M)}
    assert f"{scales['tight map'] / scales['model, cap 10']:.0f} times less" in section
