"""The black-box audit's score, measured in one run: each seeded bug (tests/blackbox_bugs.py)
applied alone on its case, and the real engine on many (query, dataset pair) cases
(tests/blackbox.py), in worker processes; the real engine's cases on one dataset pair are asked
on one opened pair of databases (their set-up is made once, not once per case). It prints
every verdict and a summary: bugs caught, cases passed, the lower bounds on the privacy loss
against the claimed epsilons, and the largest bound a case of that many answers could show at
all (what the run can see).

    python -m tests.blackbox_score --cases 1000 --n 100 --bug-n 1000 --workers 2
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pytest import MonkeyPatch

from tests import blackbox, blackbox_bugs

EPSILONS = (0.25, 0.5, 1.0)  # claims the real engine is audited at (a bound can exceed them)
GROUP = 10  # real-engine cases a worker asks on one opened dataset pair before it reports them


@dataclass(frozen=True)
class Outcome:
    """One audited run: a seeded bug's (`bug` names it) or the real engine's."""

    bug: str | None
    describe: str
    epsilon: float
    bound: float
    rejected: bool
    accounting: str | None
    seconds: float
    error: str | None = None


Task = tuple[str | None, tuple[blackbox.Case, ...], int, float]


def _outcome(bug: str | None, case: blackbox.Case, verdict: Callable[[], blackbox.Verdict],
             started: float) -> Outcome:
    try:
        v = verdict()
    except Exception as exc:  # a bug that breaks the engine is not caught by the audit
        return Outcome(bug, case.describe(), case.epsilon, math.nan, False, None,
                       time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
    return Outcome(bug, case.describe(), case.epsilon, v.bound, v.rejected, v.accounting,
                   time.perf_counter() - started)


def _run(task: Task) -> list[Outcome]:
    """A seeded bug on its case, or real-engine cases on one dataset pair (opened once)."""
    bug, cases, n, alpha = task
    started = time.perf_counter()
    if bug is not None:
        with MonkeyPatch.context() as mp:
            case = blackbox_bugs.apply(bug, mp)
            return [_outcome(bug, case, lambda: blackbox.audit(case, n, alpha), started)]
    outcomes = []
    with blackbox.opened(cases[0]) as sides:
        for case in cases:
            outcomes.append(_outcome(None, case, lambda c=case: blackbox.audit_on(sides, c, n, alpha),
                                     started))
            started = time.perf_counter()
    return outcomes


def ceiling(n: int, alpha: float, events: int) -> float:
    """The largest bound a case of n answers a side can show: an event met by every test
    answer on one side and none on the other, at the level each event's bound is made."""
    test = n - max(1, n // 5)
    level = alpha / (2 * events)
    low, _ = blackbox.clopper_pearson(test, test, level)
    _, high = blackbox.clopper_pearson(0, test, level)
    return math.log(low / high)


def score(bugs: tuple[str, ...], cases: int, n: int, bug_n: int, alpha: float, workers: int,
          report: Callable[[Outcome], None]) -> list[Outcome]:
    """Every bug in `bugs` at bug_n answers a side, then `cases` real-engine cases at n."""
    tasks: list[Task] = [(name, (blackbox_bugs.BUGS[name][1],), bug_n, alpha) for name in bugs]
    tasks += [(None, tuple(group), n, alpha)
              for group in blackbox.by_pair(blackbox.cases(cases, EPSILONS), GROUP)]
    outcomes = []
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=10) as pool:
        for done in pool.imap_unordered(_run, tasks):
            outcomes += done
            for outcome in done:
                report(outcome)
    return outcomes


def summary(outcomes: list[Outcome], n: int, bug_n: int, alpha: float) -> str:
    bugs = [o for o in outcomes if o.bug is not None]
    real = [o for o in outcomes if o.bug is None]
    lines = [f"seeded bugs caught: {sum(o.rejected for o in bugs)} of {len(bugs)} "
             f"({bug_n} answers a side, alpha {alpha:g} per case)"]
    for o in sorted(bugs, key=lambda o: list(blackbox_bugs.BUGS).index(o.bug or "")):
        lines.append(f"  {'caught' if o.rejected else 'MISSED'}  bound {o.bound:6.3f} claim "
                     f"{o.epsilon:g}  {o.accounting or o.error or ''}  {o.bug}")
    lines.append(f"real engine: {sum(not o.rejected for o in real)} of {len(real)} cases passed "
                 f"({n} answers a side, {2 * n * len(real)} answers)")
    for eps in sorted({o.epsilon for o in real}):
        at = [o.bound for o in real if o.epsilon == eps and math.isfinite(o.bound)]
        if at:
            lines.append(f"  claim {eps:g}: {len(at)} cases, largest bound {max(at):.3f}, "
                         f"median {float(np.median(at)):.3f}")
    for answers in (n, bug_n):
        lines.append(f"largest bound a case can show at {answers} answers a side: "
                     f"{ceiling(answers, alpha, 12):.2f} (one output column) to "
                     f"{ceiling(answers, alpha, 32):.2f} (several)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--n", type=int, default=100, help="answers a side, real engine")
    parser.add_argument("--bug-n", type=int, default=1000, help="answers a side, seeded bugs")
    parser.add_argument("--alpha", type=float, default=1e-4, help="false rejection per case")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    started = time.perf_counter()

    def report(o: Outcome) -> None:
        flag = "REJECT" if o.rejected else "pass"
        print(f"{flag} bound {o.bound:7.3f} claim {o.epsilon:g} {o.seconds:5.1f}s "
              f"{o.accounting or o.error or ''} {o.bug or ''} {o.describe}", flush=True)

    outcomes = score(tuple(blackbox_bugs.BUGS), args.cases, args.n, args.bug_n, args.alpha,
                     args.workers, report)
    print(summary(outcomes, args.n, args.bug_n, args.alpha))
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
