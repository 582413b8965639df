"""The black-box audit's real-engine answers per second, two ways in one run: each case opening
its own pair of databases (`blackbox.audit`, the set-up made once per case) and the cases of
one dataset pair asked on one opened pair (`blackbox.opened` + `audit_on`, as the score runs
them). The cases alternate between the two ways, so both see the same load. Every answer is
`PrivateDatabase.query` end to end either way.

Run: `python -m benchmarks.blackbox_rate [--n 100] [--queries 10]`.
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.machine import machine
from tests import blackbox, blackbox_score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="answers a side")
    parser.add_argument("--queries", type=int, default=10, help="cases, one query shape each")
    args = parser.parse_args()
    group = blackbox.by_pair(blackbox.cases(300, blackbox_score.EPSILONS))[0]
    picked = [case for case in group if case.epsilon == blackbox_score.EPSILONS[0]][:args.queries]
    load = os.getloadavg()[0]
    own = shared = 0.0
    started = time.perf_counter()
    with blackbox.opened(picked[0]) as sides:
        shared += time.perf_counter() - started
        for case in picked:
            own += blackbox.audit(case, args.n, 1e-4).seconds
            shared += blackbox.audit_on(sides, case, args.n, 1e-4).seconds
        started = time.perf_counter()
    shared += time.perf_counter() - started  # closing the pair
    answers = 2 * args.n * len(picked)
    print(f"{machine()}; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"{len(picked)} cases ({answers} answers each way, {args.n} a side)")
    print("| cases asked on | seconds | answers per second |")
    print("|---|---:|---:|")
    print(f"| a pair opened per case | {own:.1f} | {answers / own:.1f} |")
    print(f"| one pair opened for all | {shared:.1f} | {answers / shared:.1f} |")


if __name__ == "__main__":
    main()
