"""A black-box audit of released answers: run the engine end to end on two neighbouring
datasets many times and test, with stated confidence, whether the released distributions are
further apart than the claimed epsilon allows.

For each case (a query, an epsilon and a pair of datasets that differ in one individual's
rows, or in one household's under a declared household model) the engine answers n times on
each dataset. A pilot fifth of the answers picks thresholds (the two sides' medians in the
output columns that moved most, and halfway between); on the other four fifths every event
{x_j >= c} and {x_j < c} gives the lower confidence bound ln(P_low(E | D) / P_high(E | D'))
on the privacy loss, P_low and P_high Clopper-Pearson bounds at level alpha / (2 x events)
each, in both directions. The case is rejected when the largest bound exceeds the claimed
epsilon: with probability at least 1 - alpha no correct engine is rejected (Bonferroni over
events and both sides). It also rejects when the ledger did not charge what the answers
state. The audit never reads the engine's calibration or exact answers, only its releases.

Run the large audit with `python -m tests.blackbox --cases 1000` (tests/test_audit_blackbox.py
runs a short one and the seeded bugs)."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import numpy as np
import yaml
from dpsql.engine.database import PrivateDatabase
from scipy.stats import beta

from tests.support import BASE_POLICY, STATES, create_ledger

Row = tuple[str, int, float, bool]  # state, age, income, sick
COLUMNS = 2  # output columns an audit tests (those its pilot finds most changed)


@dataclass(frozen=True)
class Case:
    """One query asked at `epsilon` on two datasets: the base rows plus the target's rows
    `before` versus `after` (and, in a household case, the partner's rows the same)."""

    sql: str
    epsilon: float
    before: tuple[Row, ...]
    after: tuple[Row, ...]
    household: bool = False  # the target's partner holds the same rows (k = 2, eta = 1)
    seed: int = 0  # the base population

    def describe(self) -> str:
        model = "household k=2 eta=1" if self.household else "k=1"
        return f"{self.sql} @ eps {self.epsilon:g} ({model}): {self.before} -> {self.after}"

    @property
    def pair(self) -> tuple[tuple[Row, ...], tuple[Row, ...], bool, int]:
        """What the two datasets are made of: cases with the same pair share them."""
        return self.before, self.after, self.household, self.seed


@dataclass
class Verdict:
    """A case's lower confidence bound on the privacy loss and whether it rejects the claim."""

    case: Case
    bound: float
    rejected: bool
    accounting: str | None = None  # what the ledger got wrong, if anything
    samples: int = 0
    seconds: float = 0.0
    events: int = field(default=0)


def clopper_pearson(count: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds, each holding with probability 1 - alpha."""
    low = 0.0 if count == 0 else float(beta.ppf(alpha, count, n - count + 1))
    high = 1.0 if count == n else float(beta.ppf(1 - alpha, count + 1, n - count))
    return low, high


def loss_lower_bound(a: np.ndarray, b: np.ndarray, alpha: float,
                     width: int | None = None) -> tuple[float, int]:
    """The largest lower confidence bound on ln(P(E|A) / P(E|B)) over threshold events in
    both directions (rows: releases; columns: output values, the first `width` released and
    the rest derived from them), and the number of events.

    A pilot fifth of each side picks the events: in the COLUMNS columns whose pilot medians
    differ most (relative to their spread), the cuts at either median and halfway between,
    where a shifted noise distribution's ratio is largest at a probability near 1/2; and the
    four quadrants of the halfway cuts of the two released columns that moved most, where
    independent noises' ratios multiply. Only the other four fifths are counted."""
    width = a.shape[1] if width is None else width
    pilot = max(1, len(a) // 5)
    pa, pb = a[:pilot], b[:pilot]
    spread = np.maximum(np.quantile(np.vstack([pa, pb]), 0.75, axis=0)
                        - np.quantile(np.vstack([pa, pb]), 0.25, axis=0), 1e-12)
    ma, mb = np.median(pa, axis=0), np.median(pb, axis=0)
    moved = np.abs(ma - mb) / spread
    test_a, test_b = a[pilot:], b[pilot:]
    events: list[tuple[np.ndarray, np.ndarray]] = []
    for j in np.argsort(-moved)[:COLUMNS]:
        for c in sorted({ma[j], mb[j], (ma[j] + mb[j]) / 2}):
            events += [(test_a[:, j] >= c, test_b[:, j] >= c), (test_a[:, j] < c, test_b[:, j] < c)]
    if width > 1:
        pair = np.argsort(-moved[:width])[:2]
        halves = [(test_a[:, j] >= (ma[j] + mb[j]) / 2, test_b[:, j] >= (ma[j] + mb[j]) / 2)
                  for j in pair]
        for flip in itertools.product((False, True), repeat=2):
            sides = [(x ^ f, y ^ f) for (x, y), f in zip(halves, flip, strict=True)]
            events.append((sides[0][0] & sides[1][0], sides[0][1] & sides[1][1]))
    level = alpha / (2 * 2 * len(events))  # each event in both directions, two bounds each
    best = -math.inf
    for inside_a, inside_b in events:
        ca, cb = int(inside_a.sum()), int(inside_b.sum())
        for (x, nx), (y, ny) in (((ca, len(test_a)), (cb, len(test_b))),
                                 ((cb, len(test_b)), (ca, len(test_a)))):
            low, _ = clopper_pearson(x, nx, level)
            _, high = clopper_pearson(y, ny, level)
            if low > 0:
                best = max(best, math.log(low / high))
    return best, 2 * len(events)


def _population(seed: int, units: int = 30) -> list[tuple[int, Row]]:
    rng = np.random.default_rng(seed)
    rows = []
    for unit in range(units):
        for _ in range(int(rng.integers(1, 3))):
            rows.append((unit, (STATES[int(rng.integers(0, 4))], int(rng.integers(0, 101)),
                                round(float(rng.uniform(0, 1000)), 2), bool(rng.random() < 0.3))))
    return rows


def _write(path: Path, rows: list[tuple[int, Row]]) -> Path:
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE people (person_id BIGINT, state VARCHAR, age BIGINT, income "
                     "DOUBLE, sick BOOLEAN, note VARCHAR)")
        conn.executemany("INSERT INTO people VALUES (?, ?, ?, ?, ?, 'row')",
                         [(unit, *row) for unit, row in rows])
    return path


def dataset(case: Case, side: tuple[Row, ...], folder: Path) -> tuple[Path, Path]:
    """The data and policy of one side of a case: the base population, the target (unit 1000)
    with `side`'s rows and, in a household case, the partner (unit 1001) with the same rows:
    the model k = 2, eta = 1 (a household's records may be copies, the others independent),
    drawn conditioned on the target's record."""
    rows = _population(case.seed) + [(1000, row) for row in side]
    if case.household:
        rows += [(1001, row) for row in side]
    policy = {**BASE_POLICY, "budget": {"epsilon": 1e6},
              "dependence": {"k": 2 if case.household else 1, "eta": 1.0 if case.household else 0.0,
                             "mode": "auto"}}
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    return _write(folder / "people.duckdb", rows), folder / "policy.yaml"


def _releases(private: PrivateDatabase, case: Case, n: int) -> tuple[list[np.ndarray], str | None]:
    """n answers (each its numeric cells in order), and what the ledger got wrong: each answer
    must be charged its stated epsilon_dp and kept in the history under its own id (the
    database may have answered other cases before: only what these n answers add is checked)."""
    before = private.budget().spent_dp
    stated = 0.0
    out, ids = [], set()
    for _ in range(n):
        result = private.query(case.sql, epsilon=case.epsilon)
        stated += result.epsilon_dp
        ids.add(result.id)
        out.append(result.df.select_dtypes("number").to_numpy(dtype=float).ravel())
    spent = private.budget().spent_dp - before
    problem = None
    if spent < stated * (1 - 1e-9):
        problem = f"charged {spent:.6g} for answers stating {stated:.6g}"
    elif len(ids) < n or not all(i is not None and private.ledger.history(private.analyst, i)
                                 for i in ids):
        problem = "answers missing from the history"
    return out, problem


def as_matrices(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Both sides' answers as matrices of one width: answers of fewer cells are padded with a
    value far below any answer and, when the number of cells varies, it is a released column of
    its own (the answer's shape is part of what is released)."""
    width = max(len(x) for x in (*a, *b))
    shaped = len({len(x) for x in (*a, *b)}) > 1

    def matrix(rows: list[np.ndarray]) -> np.ndarray:
        padded = np.full((len(rows), width + shaped), -1e12)
        for i, row in enumerate(rows):
            padded[i, :len(row)] = np.nan_to_num(row, nan=-1e12)
            if shaped:
                padded[i, width] = len(row)
        return padded

    return matrix(a), matrix(b)


def with_derived(values: np.ndarray) -> np.ndarray:
    """The output columns, their total and their pairwise differences: functions of the
    release (so tested like it), in which a change moving two values shows whole."""
    columns = values.shape[1]
    extra = [values.sum(axis=1, keepdims=True)] if columns > 1 else []
    extra += [values[:, [i]] - values[:, [j]] for i in range(columns) for j in range(i + 1, columns)]
    return np.hstack([values, *extra])


@contextlib.contextmanager
def opened(case: Case, root: Path | None = None) -> Iterator[tuple[PrivateDatabase, ...]]:
    """Both datasets of `case` opened as the engine opens them (`PrivateDatabase.connect` on a
    DuckDB file, a policy and a ledger of its own each, in `root` or a temporary folder on
    /dev/shm); every case on the same pair (`Case.pair`) may be asked on them."""
    with contextlib.ExitStack() as stack:
        base = Path(root) if root is not None else Path(stack.enter_context(
            tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None)))
        sides = []
        for name, side in (("a", case.before), ("b", case.after)):
            folder = base / name
            folder.mkdir(parents=True, exist_ok=True)
            db, policy = dataset(case, side, folder)
            ledger = create_ledger(folder / "ledger.sqlite", policy)
            # n fresh draws of the same query: reuse would release one answer n times
            sides.append(stack.enter_context(PrivateDatabase.connect(db, policy, ledger, reuse=False)))
        yield tuple(sides)


def audit_on(sides: tuple[PrivateDatabase, ...], case: Case, n: int, alpha: float) -> Verdict:
    """Ask `case` n times on each of its two opened datasets and test its claimed epsilon."""
    started = time.perf_counter()
    samples, problems = zip(*(_releases(private, case, n) for private in sides), strict=True)
    a, b = as_matrices(*samples)
    bound, events = loss_lower_bound(with_derived(a), with_derived(b), alpha, a.shape[1])
    accounting = next((p for p in problems if p is not None), None)
    return Verdict(case, bound, bound > case.epsilon or accounting is not None, accounting,
                   2 * n, time.perf_counter() - started, events)


def audit(case: Case, n: int, alpha: float, root: Path | None = None) -> Verdict:
    """Run `case` n times on each dataset, end to end, and test its claimed epsilon."""
    started = time.perf_counter()
    with opened(case, root) as sides:
        verdict = audit_on(sides, case, n, alpha)
    return replace(verdict, seconds=time.perf_counter() - started)


def by_pair(cases: Iterable[Case], most: int | None = None) -> list[list[Case]]:
    """The cases grouped by dataset pair, in order of first appearance, at most `most` a group:
    each group is asked on one pair of opened databases."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.pair, []).append(case)
    size = most or max(map(len, groups.values()), default=1)
    return [group[i:i + size] for group in groups.values() for i in range(0, len(group), size)]


# The query shapes, and the changes of the target's rows each is audited under.
QUERIES = (
    "SELECT COUNT(*) AS n FROM people",
    "SELECT COUNT(*) AS n FROM people WHERE age > 50",
    "SELECT SUM(age) AS s FROM people",
    "SELECT SUM(income) AS s FROM people WHERE sick",
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state",
    "SELECT state, SUM(age) AS s FROM people GROUP BY state",
    "SELECT COUNT(*) AS n, SUM(age) AS s FROM people",
    "SELECT AVG(age) AS a FROM people",
    "SELECT sick, COUNT(*) AS n FROM people GROUP BY sick",
    "SELECT COUNT(DISTINCT person_id) AS u FROM people",
)
CHANGES: tuple[tuple[tuple[Row, ...], tuple[Row, ...]], ...] = (
    ((("CA", 0, 0.0, False),), (("CA", 100, 1000.0, True),)),
    ((("CA", 100, 1000.0, True),), (("NY", 100, 1000.0, True),)),
    ((("TX", 30, 10.0, False),), (("TX", 90, 900.0, True), ("TX", 90, 900.0, True))),
    ((("WA", 60, 500.0, True),), (("CA", 0, 0.0, False), ("NY", 100, 1000.0, True))),
    ((("CA", 100, 1000.0, True), ("CA", 100, 1000.0, True)), ()),
)


def cases(count: int, epsilons: tuple[float, ...] = (0.5, 1.0, 2.0)) -> Iterator[Case]:
    """`count` cases cycling through queries, changes, epsilons, both dependence models and
    base populations."""
    grid = itertools.product(QUERIES, CHANGES, epsilons, (False, True))
    for i, (sql, (before, after), epsilon, household) in enumerate(itertools.cycle(grid)):
        if i == count:
            return
        yield Case(sql, epsilon, before, after, household, seed=i // 300)


def run(count: int, n: int, alpha: float, report: Callable[[Verdict], None]) -> list[Verdict]:
    verdicts = []
    for group in by_pair(cases(count)):
        with opened(group[0]) as sides:
            for case in group:
                verdicts.append(audit_on(sides, case, n, alpha))
                report(verdicts[-1])
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--n", type=int, default=200, help="answers on each dataset per case")
    parser.add_argument("--alpha", type=float, default=1e-4, help="false rejection per case")
    args = parser.parse_args()
    started = time.perf_counter()

    def report(v: Verdict) -> None:
        flag = "REJECT" if v.rejected else "pass"
        print(f"{flag} bound {v.bound:7.3f} claim {v.case.epsilon:g} {v.seconds:5.1f}s "
              f"{v.accounting or ''} {v.case.describe()}", flush=True)

    verdicts = run(args.cases, args.n, args.alpha, report)
    rejected = sum(v.rejected for v in verdicts)
    ratios = [v.bound / v.case.epsilon for v in verdicts if math.isfinite(v.bound)]
    print(f"cases {len(verdicts)}, answers {sum(v.samples for v in verdicts)}, rejected "
          f"{rejected}, largest bound/claim {max(ratios):.3f}, median {np.median(ratios):.3f}, "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
