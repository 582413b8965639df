"""Latency of `dpsql serve` under 16 concurrent clients on 127.0.0.1, and its RESULTS.md section.

    python -m benchmarks.service [--clients 16] [--requests 150] [--rows 100000]

starts `dpsql serve` in a subprocess on a generated people table, sends every client's requests
(query, explain, budget and schema in turn, each client with its own token and a cap that admits
a fixed number of answers), and records the latency percentiles of each kind of request in
benchmarks/out/service.json and in the "Service latency" section of benchmarks/RESULTS.md.
tests/test_service_load.py drives a service with the same `drive` and checks the outcomes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

KINDS = ("query", "explain", "budget", "schema")
SQL = "SELECT state, COUNT(*) AS n, AVG(income) AS mean_income FROM people GROUP BY state"
EPSILON = 0.05
HERE = Path(__file__).resolve().parent
HEADING = "## Service latency"


@dataclass(frozen=True)
class Outcome:
    """One request a client sent: what, the HTTP status, its latency and the answer's id."""

    client: int
    kind: str
    status: int
    seconds: float
    error_type: str | None
    answer_id: int | None
    answer: dict | None


def drive(url: str, tokens: list[str], requests: int, sql: str = SQL,
          epsilon: float = EPSILON) -> list[Outcome]:
    """Every client (one thread and one token each) sends `requests` requests, all clients at
    once after a common start; returns every outcome."""
    start = threading.Barrier(len(tokens))
    outcomes: list[list[Outcome]] = [[] for _ in tokens]

    def client(number: int, token: str) -> None:
        with httpx.Client(base_url=url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            start.wait()
            for j in range(requests):
                kind = KINDS[j % len(KINDS)]
                began = time.perf_counter()
                if kind in ("query", "explain"):
                    response = http.post(f"/v1/{kind}", json={"sql": sql, "epsilon": epsilon})
                else:
                    response = http.get(f"/v1/{kind}")
                seconds = time.perf_counter() - began
                body = response.json()
                ok = response.status_code == 200
                ident = response.headers.get("Dpsql-Answer-Id")
                outcomes[number].append(Outcome(
                    number, kind, response.status_code, seconds,
                    None if ok else body.get("type"), None if ident is None else int(ident),
                    body if ok and kind == "query" else None))

    threads = [threading.Thread(target=client, args=(i, t)) for i, t in enumerate(tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [o for per_client in outcomes for o in per_client]


def percentiles(outcomes: list[Outcome]) -> dict[str, dict[str, float]]:
    """Latency percentiles (ms) of each kind of request, admitted queries apart from refused."""
    groups: dict[str, list[float]] = {}
    for o in outcomes:
        name = o.kind if o.kind != "query" else ("query (answered)" if o.status == 200
                                                 else "query (refused: cap)")
        groups.setdefault(name, []).append(o.seconds * 1000)
    return {name: {"count": len(ms), **{f"p{p}": float(np.percentile(ms, p)) for p in (50, 90, 99)},
                   "max": max(ms)} for name, ms in groups.items()}


def section(stored: dict) -> list[str]:
    """The RESULTS.md section of a stored run."""
    lines = [HEADING, "", f"Command: `{stored['command']}` ({stored['when']} UTC; {stored['machine']}).", "",
             f"`dpsql serve` in its own process on 127.0.0.1; {stored['clients']} clients (threads, one "
             f"token each, all started together) send {stored['requests']} requests each, in turn "
             f"query, explain, budget and schema; {stored['rows']:,} rows; each analyst's cap admits "
             f"{stored['admitted_per_client']} answers of ε = {stored['epsilon']:g}, so later queries "
             f"are refused (403) before the data is read. {stored['total']} requests in "
             f"{stored['seconds']:.1f} s ({stored['total'] / stored['seconds']:.0f} per second).", "",
             "| request | count | p50 ms | p90 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|"]
    for name, p in stored["latency"].items():
        lines.append(f"| {name} | {p['count']} | {p['p50']:.1f} | {p['p90']:.1f} | {p['p99']:.1f} "
                     f"| {p['max']:.1f} |")
    return lines + [""]


def _write_section(stored: dict) -> None:
    """Replace (or add) this section of RESULTS.md."""
    target = HERE / "RESULTS.md"
    text = target.read_text().splitlines()
    begin = next((i for i, line in enumerate(text) if line == HEADING), None)
    if begin is None:
        text = text + [""] + section(stored)
    else:
        end = next((i for i in range(begin + 1, len(text)) if text[i].startswith("## ")), len(text))
        text = text[:begin] + section(stored) + text[end:]
    target.write_text("\n".join(text).rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--admitted", type=int, default=10, help="answers each cap admits")
    args = parser.parse_args(argv)
    from benchmarks.report import machine
    from tests.support import create_ledger, make_people, write_policy

    dpsql = [sys.executable, "-m", "dpsql"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = make_people(folder / "people.duckdb", units=args.rows // 2)
        policy = write_policy(folder / "policy.yaml")
        ledger = create_ledger(folder / "ledger.sqlite", policy)
        cap = str(args.admitted * EPSILON)
        tokens = [subprocess.run([*dpsql, "analyst", "add", f"client{i}", "--cap", cap, "--ledger",
                                  str(ledger)], check=True, capture_output=True, text=True,
                                 cwd=HERE.parent).stdout.strip() for i in range(args.clients)]
        with _served(dpsql, db, policy, ledger) as url:
            began = time.perf_counter()
            outcomes = drive(url, tokens, args.requests)
            seconds = time.perf_counter() - began
    answered = sum(o.kind == "query" and o.status == 200 for o in outcomes)
    unexpected = [o for o in outcomes if o.status != 200 and o.error_type != "BudgetExhausted"]
    if unexpected or answered != args.clients * args.admitted:
        raise SystemExit(f"unexpected outcomes: {answered} answers, {len(unexpected)} errors")
    given = " ".join(sys.argv[1:] if argv is None else argv)
    stored = {"command": f"python -m benchmarks.service {given}".strip(),
              "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": machine(),
              "clients": args.clients, "requests": args.requests, "rows": args.rows,
              "admitted_per_client": args.admitted, "epsilon": EPSILON, "total": len(outcomes),
              "seconds": seconds, "latency": percentiles(outcomes)}
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "service.json").write_text(json.dumps(stored, indent=2))
    _write_section(stored)
    print("\n".join(section(stored)))


class _served:
    """`dpsql serve` in a subprocess on a free port, stopped (SIGINT, then killed) on exit."""

    def __init__(self, dpsql: list[str], db: Path, policy: Path, ledger: Path) -> None:
        self.command = [*dpsql, "serve", "--db", str(db), "--policy", str(policy), "--ledger",
                        str(ledger), "--port", "0"]

    def __enter__(self) -> str:
        self.process = subprocess.Popen(self.command, cwd=HERE.parent, stderr=subprocess.PIPE, text=True,
                                        stdout=subprocess.DEVNULL,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.url = wait_for_url(self.process)
        return self.url

    def __exit__(self, *exc) -> None:
        stop(self.process)


def wait_for_url(process: subprocess.Popen, timeout: float = 120) -> str:
    """The URL uvicorn says it is running on (read from the process's standard error), once
    /healthz answers 200."""
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    url = None
    while url is None:
        line = process.stderr.readline()
        if not line or time.monotonic() > deadline:
            raise RuntimeError(f"dpsql serve did not start: {line}")
        if "Uvicorn running on " in line:
            url = line.split("Uvicorn running on ", 1)[1].split()[0]
    threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe drained
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                return url
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("dpsql serve did not become ready")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(2)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
