"""CPU time of each kind of service request, in one process and without HTTP: a query (charged,
ε = 0.01) on the worker's database, an explain on the planner's, and a token check, a budget
and the schema on the reader's, as `dpsql serve` runs them; and, with `--charges N`, only N
charged COUNT(*)s, for counting the ledger's syncs per charge under strace.

    python -m benchmarks.service_cpu [--rows 100000] [--repeats 30]
    strace -f -c -e trace=fsync,fdatasync python -m benchmarks.service_cpu --charges 51  (and 1)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dpsql.engine.database import PrivateDatabase
from dpsql.engine.service.auth import identify, new_analyst
from dpsql.engine.service.reader import Reader, planner
from dpsql.engine.service.schema import public_schema

from benchmarks.service import SOAK_EPSILON, SQL


def cpu_ms(call: Callable[[], object], repeats: int) -> float:
    """Median CPU milliseconds of the process per call, after three warm-up calls."""
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        began = time.process_time()
        call()
        times.append((time.process_time() - began) * 1e3)
    return statistics.median(times)


def main() -> None:
    from tests.support import create_ledger, make_people, write_policy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--charges", type=int, default=0, help="only make this many charges")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = make_people(folder / "people.duckdb", units=args.rows // 2)
        policy = write_policy(folder / "policy.yaml")
        ledger = create_ledger(folder / "ledger.sqlite", policy)
        with PrivateDatabase.connect(db, policy, ledger, reuse=False) as worker:
            if args.charges:
                for _ in range(args.charges):
                    worker.query("SELECT COUNT(*) FROM people", SOAK_EPSILON)
                return
            worker.warm()
            _, token = new_analyst(worker.ledger, "ana")
            reader, planning = Reader(worker), planner(worker)
            assert planning is not None
            header = f"Bearer {token}"
            calls = {
                "query (charged)": lambda: worker.query(SQL, SOAK_EPSILON, analyst="ana").to_dict(),
                "explain (planner)": lambda: planning.explain(SQL, SOAK_EPSILON, analyst="ana").to_dict(),
                "token check (reader)": lambda: reader.read(lambda d: identify(d.ledger, header)),
                "budget (reader)": lambda: reader.read(lambda d: (d.budget(), d.cap_status("ana"))),
                "schema (reader)": lambda: reader.read(lambda d: public_schema(d.policy)),
            }
            print(f"Command: `python -m benchmarks.service_cpu --rows {args.rows} --repeats "
                  f"{args.repeats}` (load average {os.getloadavg()[0]:.1f} on 2 cores)\n")
            print("| request | CPU ms (median) |\n|---|---:|")
            for name, call in calls.items():
                print(f"| {name} | {cpu_ms(call, args.repeats):.2f} |")
            planning.close()
            reader.close()


if __name__ == "__main__":
    main()
