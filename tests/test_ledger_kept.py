"""What a connection's own charge leaves of the ledger is read back for one `PRAGMA
data_version` only while it is still the ledger: the same state a fresh read gives after every
charge, and a fresh read once another connection commits or this one writes anything else."""

from __future__ import annotations

from dpsql.engine.accounting.ledger import Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import create_ledger
from tests.test_ledger_totals import _charge, scanned

BINDING = LedgerBinding(budget=1e6, k=2, eta=0.1)

steps = st.lists(st.tuples(st.sampled_from(["ann", "bob"]), st.floats(0.0, 3.0),
                           st.one_of(st.none(), st.frozensets(st.sampled_from(["t.a", "t.b"]))),
                           st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=2).map(tuple)),
                           st.booleans()), max_size=12)


def _charge_on(ledger: Ledger, analyst: str, eps_dp: float, cols=frozenset(), points=None,
               named: bool = True) -> None:
    charge = _charge(analyst, eps_dp, cols, points)
    ledger.charge(lambda state: (charge, None), analyst if named else None)


@settings(max_examples=30, deadline=None)
@given(steps)
def test_the_state_after_each_charge_is_what_a_fresh_read_gives(tmp_path_factory, sequence):
    """Charges by two analysts, some from a second connection: after each, both connections'
    state is the state a third, fresh connection reads, and the totals are a scan's."""
    path = create_ledger(tmp_path_factory.mktemp("kept") / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as mine, Ledger(path, BINDING) as other:
        for analyst, eps_dp, cols, points, elsewhere in sequence:
            _charge_on(other if elsewhere else mine, analyst, eps_dp, cols, points)
            with Ledger(path, BINDING) as fresh:
                assert mine.state() == other.state() == fresh.state()
            spent, read, _ = scanned(path)
            assert mine.state().books.spent == spent and mine.state().books.read == read


def test_a_state_after_a_charge_reads_one_pragma_until_another_connection_commits(tmp_path):
    path = create_ledger(tmp_path / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as mine, Ledger(path, BINDING) as other:
        _charge_on(mine, "ann", 0.5)
        statements: list[str] = []
        # (sqlite traces what a statement runs inside it, a pragma function's, after "-- ")
        mine._conn.set_trace_callback(lambda text: text.startswith("-- ") or statements.append(text))
        assert mine.state().books.spent == 0.5
        assert statements == ["PRAGMA data_version"]
        _charge_on(other, "bob", 0.25)
        statements.clear()
        assert mine.state().books.spent == 0.75  # another connection's charge: read afresh
        assert len(statements) == 2 and statements[1].startswith("SELECT 0, key, value")
        # The charge under the write lock reads afresh too, and adds to what is there now.
        _charge_on(mine, "ann", 0.125)
        assert mine.state().books.spent == other.state().books.spent == 0.875


def test_a_write_of_this_connection_other_than_a_charge_is_read_afresh(tmp_path):
    path = create_ledger(tmp_path / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as ledger:
        _charge_on(ledger, "ann", 0.5)
        assert ledger.state().halted is None
        ledger.halt("a failure on the data")
        assert ledger.state().halted is not None and "a failure on the data" in ledger.state().halted
        ledger.resume()
        assert ledger.state().halted is None


def test_a_charge_that_fails_leaves_nothing_kept(tmp_path):
    path = create_ledger(tmp_path / "ledger.sqlite", BINDING)
    with Ledger(path, BINDING) as ledger:
        _charge_on(ledger, "ann", 0.5)

        def refuse(state):
            raise RuntimeError("refused")

        try:
            ledger.charge(refuse, "ann")
        except RuntimeError:
            pass
        assert ledger._kept is None
        assert ledger.state().books.spent == 0.5
