"""Latency of `dpsql serve` under 16 concurrent clients on 127.0.0.1, over HTTP and over the
Postgres wire protocol in the same run, and its RESULTS.md section.

    python -m benchmarks.service [--clients 16] [--requests 150] [--rows 100000] [--note TEXT]
    python -m benchmarks.service --minutes 10 [--clients 16] [--rows 100000] [--note TEXT]

starts `dpsql serve --pg-port` in a subprocess on a generated people table; first the HTTP
clients send their requests (query, explain, budget and schema in turn), then as many psycopg
clients theirs (query, EXPLAIN, a catalog question and SHOW in turn), each client with its own
analyst and a cap that admits a fixed number of answers; records the rate and latency
percentiles of each kind of request in benchmarks/out/service.json and in the "Service latency"
section of benchmarks/RESULTS.md. tests/test_service_load.py drives a service with the same
`drive` and `drive_wire` and checks the outcomes.

With `--minutes M` it is a soak instead: the HTTP clients (analysts without a cap, so every
query is charged to the one ledger) send the same turn of requests for M minutes, and the
"Service soak" section gives the requests per second and the p50/p95 latency of each minute,
with the machine's load average beside them (the machine may be shared)."""

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
WIRE_KINDS = ("query", "explain", "catalog", "show")
CATALOG_SQL = "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'people'"
SQL = "SELECT state, COUNT(*) AS n, AVG(income) AS mean_income FROM people GROUP BY state"
EPSILON = 0.05
HERE = Path(__file__).resolve().parent
HEADING = "## Service latency"
SOAK_HEADING = "## Service soak: one ledger, minute by minute"
SOAK_EPSILON = 0.01  # 100,000 answers within the test policy's budget of 1,000


@dataclass(frozen=True)
class Outcome:
    """One request a client sent: what, the HTTP status (over the wire: 200 answered, 0 an
    error whose SQLSTATE is the error_type), its latency and the answer's id."""

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
                if kind in ("query", "explain"):  # the same query again: charged each time
                    response = http.post(f"/v1/{kind}", json={"sql": sql, "epsilon": epsilon,
                                                              "reuse": False})
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


def drive_wire(pg_port: int, logins: list[tuple[str, str]], requests: int, sql: str = SQL,
               epsilon: float = EPSILON) -> list[Outcome]:
    """As `drive`, over the Postgres wire protocol: every client (one thread, one psycopg
    connection per analyst name and token) sends `requests` statements, all clients at once."""
    import psycopg

    statements = {"query": sql, "explain": f"EXPLAIN {sql}", "catalog": CATALOG_SQL,
                  "show": "SHOW dpsql.epsilon"}
    start = threading.Barrier(len(logins))
    outcomes: list[list[Outcome]] = [[] for _ in logins]

    def client(number: int, name: str, token: str) -> None:
        with psycopg.connect(host="127.0.0.1", port=pg_port, user=name, password=token, dbname="dpsql",
                             autocommit=True, connect_timeout=60) as conn:
            conn.execute(f"SET dpsql.epsilon = {float(epsilon)!r}")
            conn.execute("SET dpsql.reuse = off")  # the same query again: charged each time
            start.wait()
            for j in range(requests):
                kind = WIRE_KINDS[j % len(WIRE_KINDS)]
                began = time.perf_counter()
                try:
                    conn.execute(statements[kind]).fetchall()
                    status, error = 200, None
                except psycopg.errors.DatabaseError as exc:
                    status, error = 0, exc.sqlstate
                outcomes[number].append(Outcome(number, kind, status, time.perf_counter() - began, error,
                                                None, None))

    threads = [threading.Thread(target=client, args=(i, *login)) for i, login in enumerate(logins)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [o for per_client in outcomes for o in per_client]


def soak(url: str, tokens: list[str], seconds: float, sql: str = SQL,
         epsilon: float = SOAK_EPSILON) -> list[tuple[float, str, int, float]]:
    """Every client (one thread and one token each) sends query, explain, budget and schema in
    turn until `seconds` after the common start; returns (start offset s, kind, HTTP status,
    latency s) of every request."""
    barrier = threading.Barrier(len(tokens))
    sent: list[list[tuple[float, str, int, float]]] = [[] for _ in tokens]
    began: list[float] = []

    def client(number: int, token: str) -> None:
        with httpx.Client(base_url=url, timeout=120,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            if barrier.wait() == 0:
                began.append(time.perf_counter())
            barrier.wait()
            origin = began[0]
            j = 0
            while (at := time.perf_counter()) - origin < seconds:
                kind = KINDS[j % len(KINDS)]
                j += 1
                if kind in ("query", "explain"):  # the same query again: charged each time
                    response = http.post(f"/v1/{kind}", json={"sql": sql, "epsilon": epsilon,
                                                              "reuse": False})
                else:
                    response = http.get(f"/v1/{kind}")
                sent[number].append((at - origin, kind, response.status_code,
                                     time.perf_counter() - at))

    threads = [threading.Thread(target=client, args=(i, t)) for i, t in enumerate(tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(o for per_client in sent for o in per_client)


def per_minute(sent: list[tuple[float, str, int, float]],
               loads: list[tuple[float, float]]) -> list[dict[str, float]]:
    """Requests per second, answered queries per second and p50/p95 latency (ms, of every
    request and of the queries) in each minute of a soak, with the 1-minute load average."""
    minutes = []
    for m in range(int(max(at for at, *_ in sent) // 60) + 1):
        inside = [o for o in sent if m * 60 <= o[0] < (m + 1) * 60]
        span = min(60.0, max(at for at, *_ in inside) - m * 60) if inside else 60.0
        if len(inside) < 2 or span < 30.0:
            continue  # the last requests straddling the end: not a minute
        every = [o[3] * 1000 for o in inside]
        queries = [o[3] * 1000 for o in inside if o[1] == "query"]
        explains = [o[3] * 1000 for o in inside if o[1] == "explain"]
        load = [value for at, value in loads if m * 60 <= at < (m + 1) * 60]
        minutes.append({
            "minute": m + 1, "requests_per_s": len(inside) / 60.0,
            "answers_per_s": sum(o[1] == "query" and o[2] == 200 for o in inside) / 60.0,
            "p50": float(np.percentile(every, 50)), "p95": float(np.percentile(every, 95)),
            "query_p50": float(np.percentile(queries, 50)),
            "query_p95": float(np.percentile(queries, 95)),
            "explain_p50": float(np.percentile(explains, 50)) if explains else float("nan"),
            "load": max(load) if load else float("nan")})
    return minutes


def soak_section(stored: dict) -> list[str]:
    """The RESULTS.md section of a stored soak."""
    minutes = stored["minutes"]
    first, last = minutes[0]["requests_per_s"], minutes[-1]["requests_per_s"]
    worst = min(m["requests_per_s"] for m in minutes)
    lines = [SOAK_HEADING, "", f"Command: `{stored['command']}` ({stored['when']} UTC; "
             f"{stored['machine']})." + (f" {stored['note']}" if stored.get("note") else ""), "",
             f"`dpsql serve` in its own process on 127.0.0.1, {stored['rows']:,} rows, one ledger. "
             f"{stored['clients']} HTTP clients (threads, one token each, analysts without a cap, "
             "all started together) send query, explain, budget and schema in turn for "
             f"{stored['duration_minutes']:g} minutes; every query is answered and charged "
             f"(ε = {stored['epsilon']:g}). The load is the machine's highest 1-minute load "
             "average sampled in that minute (2 cores; the service and its clients are part of "
             "it).", "",
             "| minute | requests/s | answers/s | p50 ms | p95 ms | query p50 ms | query p95 ms "
             "| explain p50 ms | load |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in minutes:
        lines.append(f"| {m['minute']} | {m['requests_per_s']:.1f} | {m['answers_per_s']:.1f} "
                     f"| {m['p50']:.1f} | {m['p95']:.1f} | {m['query_p50']:.1f} "
                     f"| {m['query_p95']:.1f} | {m.get('explain_p50', float('nan')):.1f} "
                     f"| {m['load']:.1f} |")
    lines += ["", f"{stored['answers']:,} answers charged in all. Last minute against the first: "
              f"{last / first:.2f}x the requests per second (the slowest minute "
              f"{worst / first:.2f}x).", ""]
    return lines


def percentiles(outcomes: list[Outcome]) -> dict[str, dict[str, float]]:
    """Latency percentiles (ms) of each kind of request, admitted queries apart from refused."""
    groups: dict[str, list[float]] = {}
    for o in outcomes:
        name = o.kind if o.kind != "query" else ("query (answered)" if o.status == 200
                                                 else "query (refused: cap)")
        groups.setdefault(name, []).append(o.seconds * 1000)
    return {name: {"count": len(ms), **{f"p{p}": float(np.percentile(ms, p)) for p in (50, 95, 99)},
                   "max": max(ms)} for name, ms in groups.items()}


def section(stored: dict) -> list[str]:
    """The RESULTS.md section of a stored run."""
    lines = [HEADING, "", f"Command: `{stored['command']}` ({stored['when']} UTC; {stored['machine']})."
             + (f" {stored['note']}" if stored.get("note") else ""), "",
             f"`dpsql serve --pg-port` in its own process on 127.0.0.1, {stored['rows']:,} rows. First "
             f"{stored['clients']} HTTP clients (threads, one token each, all started together) send "
             f"{stored['requests']} requests each, in turn query, explain, budget and schema; then "
             f"{stored['clients']} psycopg clients over the Postgres wire protocol (one connection each, "
             f"logged in before the common start) send {stored['requests']} statements each, in turn the "
             "same SELECT, its EXPLAIN, a catalog question (information_schema.columns) and SHOW. Each "
             f"analyst's cap admits {stored['admitted_per_client']} answers of ε = {stored['epsilon']:g}, "
             "so later queries are refused (HTTP 403, SQLSTATE 53400) before the data is read.", ""]
    for endpoint, title in (("http", "HTTP"), ("wire", "Postgres wire protocol")):
        run = stored[endpoint]
        lines += [f"{title}: {run['total']} requests in {run['seconds']:.1f} s "
                  f"({run['total'] / run['seconds']:.0f} per second).", "",
                  "| request | count | p50 ms | p95 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|"]
        for name, p in run["latency"].items():
            lines.append(f"| {name} | {p['count']} | {p['p50']:.1f} | {p['p95']:.1f} | {p['p99']:.1f} "
                         f"| {p['max']:.1f} |")
        lines.append("")
    return lines


def _write_section(stored: dict, heading: str = HEADING) -> None:
    """Replace (or add, at the end) this section of RESULTS.md."""
    target = HERE / "RESULTS.md"
    text = target.read_text().splitlines()
    lines = section(stored) if heading == HEADING else soak_section(stored)
    begin = next((i for i, line in enumerate(text) if line == heading), None)
    if begin is None:
        text = text + [""] + lines
    else:
        # The section ends at the next heading or at the page's marker comment (report.py's
        # KEEP_MARKER), which must stay where it is.
        end = next((i for i in range(begin + 1, len(text)) if text[i].startswith(("## ", "<!--"))),
                   len(text))
        text = text[:begin] + lines + text[end:]
    target.write_text("\n".join(text).rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--admitted", type=int, default=10, help="answers each cap admits")
    parser.add_argument("--note", default="", help="said beside the command, e.g. what else ran")
    parser.add_argument("--minutes", type=float, default=0.0,
                        help="soak for this many minutes instead (HTTP, analysts without a cap)")
    args = parser.parse_args(argv)
    from benchmarks.machine import machine
    from tests.support import create_ledger, make_people, write_policy

    dpsql = [sys.executable, "-m", "dpsql"]
    if args.minutes > 0:
        _soak_main(args, parser, dpsql)
        return
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = make_people(folder / "people.duckdb", units=args.rows // 2)
        policy = write_policy(folder / "policy.yaml")
        ledger = create_ledger(folder / "ledger.sqlite", policy)
        cap = str(args.admitted * EPSILON)
        tokens = {name: subprocess.run([*dpsql, "analyst", "add", name, "--cap", cap, "--ledger",
                                        str(ledger)], check=True, capture_output=True, text=True,
                                       cwd=HERE.parent).stdout.strip()
                  for name in [f"{kind}{i}" for kind in ("client", "wire") for i in range(args.clients)]}
        with _served(dpsql, db, policy, ledger) as (url, pg_port):
            for endpoint in ("http", "wire"):
                began = time.perf_counter()
                if endpoint == "http":
                    outcomes = drive(url, [tokens[f"client{i}"] for i in range(args.clients)], args.requests)
                else:
                    outcomes = drive_wire(pg_port, [(f"wire{i}", tokens[f"wire{i}"])
                                                    for i in range(args.clients)], args.requests)
                seconds = time.perf_counter() - began
                answered = sum(o.kind == "query" and o.status == 200 for o in outcomes)
                unexpected = [o for o in outcomes if o.status != 200
                              and o.error_type not in ("BudgetExhausted", "53400")]
                if unexpected or answered != args.clients * args.admitted:
                    raise SystemExit(f"unexpected outcomes over {endpoint}: {answered} answers, "
                                     f"{len(unexpected)} errors, e.g. {unexpected[:1]}")
                runs[endpoint] = {"total": len(outcomes), "seconds": seconds, "latency": percentiles(outcomes)}
    given = " ".join(f"--{name} {value}" for name, value in vars(args).items()
                     if name != "note" and value != parser.get_default(name))
    stored = {"command": f"python -m benchmarks.service {given}".strip(),
              "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": machine(),
              "note": args.note, "clients": args.clients, "requests": args.requests, "rows": args.rows,
              "admitted_per_client": args.admitted, "epsilon": EPSILON, **runs}
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "service.json").write_text(json.dumps(stored, indent=2))
    _write_section(stored)
    print("\n".join(section(stored)))


def _soak_main(args: argparse.Namespace, parser: argparse.ArgumentParser,
               dpsql: list[str]) -> None:
    """`--minutes`: the soak, its JSON in benchmarks/out/service_soak.json and its section."""
    from benchmarks.machine import machine
    from tests.support import create_ledger, make_people, write_policy

    loads: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = make_people(folder / "people.duckdb", units=args.rows // 2)
        policy = write_policy(folder / "policy.yaml")
        ledger = create_ledger(folder / "ledger.sqlite", policy)
        tokens = [subprocess.run([*dpsql, "analyst", "add", f"client{i}", "--ledger", str(ledger)],
                                 check=True, capture_output=True, text=True,
                                 cwd=HERE.parent).stdout.strip() for i in range(args.clients)]
        with _served(dpsql, db, policy, ledger) as (url, _):
            done = threading.Event()
            origin = time.perf_counter()

            def sample() -> None:
                while not done.wait(5.0):
                    loads.append((time.perf_counter() - origin, os.getloadavg()[0]))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            sent = soak(url, tokens, args.minutes * 60)
            done.set()
    bad = [o for o in sent if o[2] != 200]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed in the soak, e.g. {bad[:1]}")
    given = " ".join(f"--{name} {value}" for name, value in vars(args).items()
                     if name != "note" and value != parser.get_default(name))
    stored = {"command": f"python -m benchmarks.service {given}".strip(),
              "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "machine": machine(),
              "note": args.note, "clients": args.clients, "rows": args.rows,
              "duration_minutes": args.minutes, "epsilon": SOAK_EPSILON,
              "answers": sum(o[1] == "query" for o in sent),
              "minutes": per_minute(sent, loads)}
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "service_soak.json").write_text(json.dumps(stored, indent=2))
    _write_section(stored, SOAK_HEADING)
    print("\n".join(soak_section(stored)))


class _served:
    """`dpsql serve --pg-port` in a subprocess on free ports, stopped (SIGINT, then killed) on exit."""

    def __init__(self, dpsql: list[str], db: Path, policy: Path, ledger: Path) -> None:
        from tests.test_service import free_port

        self.pg_port = free_port()
        self.command = [*dpsql, "serve", "--db", str(db), "--policy", str(policy), "--ledger",
                        str(ledger), "--port", "0", "--pg-port", str(self.pg_port)]

    def __enter__(self) -> tuple[str, int]:
        self.process = subprocess.Popen(self.command, cwd=HERE.parent, stderr=subprocess.PIPE, text=True,
                                        stdout=subprocess.DEVNULL,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.url = wait_for_url(self.process)
        return self.url, self.pg_port

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
