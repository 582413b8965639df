"""One PrivateDatabase serving several threads: its data connection, caches, post-processing
connection and ledger are used one thread at a time, and the budget admits exactly what it
admits with one thread."""

from __future__ import annotations

import threading

from dpsql.engine import BudgetExhausted, PrivateDatabase

from tests.support import charge_count, create_ledger, write_policy

EPSILON = 0.5  # with k = 1 the calibration is the identity: epsilon_dp = 0.5, exact in binary
ADMITTED = 6
THREADS = 8
QUERIES = ["SELECT state, COUNT(*) FROM people GROUP BY state",
           "SELECT sick, AVG(income) FROM people GROUP BY sick",
           "SELECT COUNT(DISTINCT person_id), SUM(age) FROM people WHERE age > 30"]


def _run_threads(work, count: int) -> list:
    outcomes: list = [None] * count
    start = threading.Barrier(count)

    def target(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = work(i)
        except Exception as exc:  # recorded and asserted on below
            outcomes[i] = exc

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes


def test_threads_share_one_database_and_the_budget_admits_exactly_n(people_db, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", {
        "budget": {"epsilon": ADMITTED * EPSILON},
        "dependence": {"k": 1, "eta": 0.0, "mode": "auto"}})
    ledger = create_ledger(tmp_path / "ledger.sqlite", policy)
    with PrivateDatabase.connect(people_db, policy, ledger, reuse=False) as db:
        outcomes = _run_threads(lambda i: db.query(QUERIES[i % len(QUERIES)], epsilon=EPSILON),
                                THREADS)
        answered = [o for o in outcomes if not isinstance(o, Exception)]
        refused = [o for o in outcomes if isinstance(o, Exception)]
        assert all(isinstance(o, BudgetExhausted) for o in refused), refused
        assert len(answered) == ADMITTED and len(refused) == THREADS - ADMITTED
        assert sorted(r.id for r in answered) == list(range(1, ADMITTED + 1))
        assert db.budget().remaining_dp == 0.0
        assert len(db.history()) == ADMITTED
    assert charge_count(ledger) == ADMITTED


def test_threads_explaining_many_texts_share_the_caches(setup):
    texts = [f"SELECT state, COUNT(*) FROM people WHERE age > {i} GROUP BY state HAVING COUNT(*) > {i}"
             for i in range(24)]
    with PrivateDatabase.connect(setup.db, setup.policy, setup.ledger) as db:
        alone = {sql: db.explain(sql, epsilon=1.0).rewritten_sql for sql in texts[:3]}
        outcomes = _run_threads(lambda i: db.explain(texts[i], epsilon=1.0), len(texts))
    assert not [o for o in outcomes if isinstance(o, Exception)]
    assert [o.sql for o in outcomes] == texts
    assert all(outcomes[i].rewritten_sql == alone[texts[i]] for i in range(3))
    assert charge_count(setup.ledger) == 0
