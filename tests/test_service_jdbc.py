"""The Postgres JDBC driver (Debian's libpostgresql-jdbc-java) against `dpsql serve --pg-port` on
127.0.0.1: the README's tour from a Java client compiled here (tests/jdbc/Tour.java), its answers
and charges checked against the service's stored history and HTTP; a wrong token and an over-cap
query are refused with their SQLSTATE and the HTTP error's one line."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.support import charge_count
from tests.test_service_pgwire import start

JAR = Path("/usr/share/java/postgresql.jar")
SOURCE = Path(__file__).resolve().parent / "jdbc" / "Tour.java"
TOUR = "SELECT state, COUNT(*) AS n, AVG(income) FROM people WHERE age >= 18 GROUP BY state ORDER BY n DESC"
pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None,
                       reason="java/javac not installed (Debian default-jdk-headless)"),
    pytest.mark.skipif(not JAR.is_file(), reason=f"{JAR} missing (Debian libpostgresql-jdbc-java)"),
]


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    # The tour runs each prepared statement six times, each expecting its own charge and id.
    running = start(tmp_path_factory.mktemp("jdbc"), reuse=False)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tour_class(tmp_path_factory) -> Path:
    classes = tmp_path_factory.mktemp("classes")
    subprocess.run(["javac", "-cp", str(JAR), "-d", str(classes), str(SOURCE)], check=True,
                   capture_output=True, timeout=120)
    return classes


def run_tour(pg, classes: Path, name: str, wrong: str, script: str) -> list[list[str]]:
    done = subprocess.run(["java", "-cp", f"{JAR}:{classes}", "Tour", str(pg.pg_port), name, pg.tokens[name],
                           wrong, script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split("\t") for line in done.stdout.splitlines()]


def _cell(text: str) -> object:
    """A value as Tour.java prints it: NULL, a long, a double's bits, a boolean or a string."""
    if text == "NULL":
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("d") and len(text) > 1 and all(c in "0123456789abcdef" for c in text[1:]):
        return struct.unpack("!d", bytes.fromhex(text[1:].rjust(16, "0")))[0]
    try:
        return int(text)
    except ValueError:
        return text


def results(lines: list[list[str]]) -> dict[str, tuple[list[str], list[list[object]], int]]:
    """Each labelled result: its column labels and types, its rows, and its answer id."""
    found: dict[str, tuple[list[str], list[list[object]], int]] = {}
    label = None
    for line in lines:
        if line[0] == "result":
            label = line[1]
            found[label] = (line[2:], [], -1)
        elif line[0] == "row" and label is not None:
            found[label][1].append([_cell(c) for c in line[1:]])
        elif line[0] == "answer" and label is not None:
            found[label] = (found[label][0], found[label][1], int(line[1]))
            label = None
    return found


def expected(stored: dict) -> tuple[list[str], list[list[object]]]:
    """The columns and rows the endpoint must send for a stored answer: each noisy column
    followed by its `_ci95` (per cell, or simultaneous when rows were chosen by noise)."""
    answer = stored["answer"]
    intervals = answer["ci95"] if answer["selection_adjusted"] else answer["ci95_simultaneous"]
    noisy = [i for i in range(len(answer["columns"])) if any(r[i] is not None for r in intervals)]
    columns: list[str] = []
    for i, name in enumerate(answer["columns"]):
        columns += [name] + ([f"{name}_ci95"] if i in noisy else [])
    rows = [[cell for i, value in enumerate(row) for cell in ([value, ci[i]] if i in noisy else [value])]
            for row, ci in zip(answer["rows"], intervals, strict=True)]
    return columns, rows


def test_the_readme_tour_through_jdbc_matches_the_stored_history_and_http(pg, tour_class):
    before = charge_count(pg.ledger)
    lines = run_tour(pg, tour_class, "ana", "x" * 43, "tour")
    errors = {line[1]: line[2:] for line in lines if line[0] == "error"}
    state, message = errors["login"]
    assert state == "28P01" and message.startswith("password authentication failed for user 'ana'")
    assert ["version", "16.0"] in lines and ["table", "people"] in lines
    assert [line[1:] for line in lines if line[0] == "column"] == \
        [["age", "int8"], ["income", "float8"], ["state", "varchar"], ["sick", "bool"], ["note", "varchar"]]
    assert {line[1]: int(line[2]) for line in lines if line[0] == "metadata"} == \
        {"schemas": 2, "primary keys": 0, "imported keys": 0, "indexes": 0, "functions": 0}
    assert ["described", "unknown"] in lines
    found = results(lines)
    # the tour query, six runs of a PreparedStatement (binary results from the sixth), six with an
    # untyped parameter (the driver describes the statement first), a fetch of 2 rows at a time
    assert list(found) == ["tour"] + [f"prepared {i}" for i in range(6)] + [f"untyped {i}" for i in range(6)] \
        + ["fetched"]
    assert charge_count(pg.ledger) == before + len(found)  # explain and the refusal cost nothing
    with pg.http("ana") as http:
        for label, (columns, rows, ident) in found.items():
            stored = http.get("/v1/history", params={"id": ident}).json()[0]
            assert stored["analyst"] == "ana"
            names, values = expected(stored)
            assert [c.rsplit(":", 1)[0] for c in columns] == names, label
            assert rows == values, label  # every cell as released, the float bits included
        assert found["tour"][0] == ["state:text", "n:int8", "n_ci95:float8", "AVG(income):float8",
                                    "AVG(income)_ci95:float8"]
        assert found["prepared 5"][0] == ["sick:bool", "COUNT(*):int8", "COUNT(*)_ci95:float8"]
        history = {e["id"]: e for e in http.get("/v1/history").json()}
        assert history[found["tour"][2]]["sql"] == TOUR
        assert history[found["prepared 5"][2]]["sql"].endswith("WHERE age >= 18 GROUP BY sick")
        assert history[found["untyped 5"][2]]["sql"].endswith("WHERE state = 'CA'")
        # the same query over HTTP is charged the same
        tour = history[found["tour"][2]]
        over_http = http.post("/v1/query", json={"sql": TOUR, "epsilon": 0.25}).json()
        assert {k: over_http[k] for k in ("epsilon", "epsilon_dp", "mode", "cost")} == \
            {k: tour["answer"][k] for k in ("epsilon", "epsilon_dp", "mode", "cost")}
        # EXPLAIN as rows, and a refusal with the HTTP error's one line and its SQLSTATE
        plan = [line[1] for line in lines if line[0] == "explain"]
        assert plan[0] == "sql: SELECT SUM(income) FROM people" and "epsilon: 0.25" in plan
        assert [line for line in plan if line.startswith("output ")] == \
            ["output SUM(income): expected 95% error ±23,966"]
        state, message = errors["refused"]
        assert state == "0A000"
        assert message == http.post("/v1/query", json={"sql": "SELECT age FROM people",
                                                       "epsilon": 0.25}).json()["error"]


def test_an_over_cap_query_is_refused_with_53400_and_the_connection_stays_usable(pg, tour_class):
    before = charge_count(pg.ledger)
    with pg.http("bob") as http:
        over_http = http.post("/v1/query", json={"sql": TOUR, "epsilon": 5}).json()["error"]
        lines = run_tour(pg, tour_class, "bob", pg.tokens["ana"], "capped")
        errors = {line[1]: line[2:] for line in lines if line[0] == "error"}
        assert errors["login"][0] == "28P01"  # another analyst's token is a wrong one
        state, message = errors["over cap"]
        assert state == "53400" and message == over_http and "over your cap" in message
        columns, rows, ident = results(lines)["after"]
        stored = http.get("/v1/history", params={"id": ident}).json()[0]
    assert [c.rsplit(":", 1)[0] for c in columns] == expected(stored)[0] and rows == expected(stored)[1]
    assert charge_count(pg.ledger) == before + 1
