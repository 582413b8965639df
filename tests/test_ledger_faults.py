"""A ledger that is corrupted, truncated, from another policy or not writable gives a clear
error and never resets spending; a stricter policy is accepted and recorded, a lenient one
refused (past spending is never re-interpreted more leniently)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from dpsql.calibration import DependenceModel, transcript_level
from dpsql.engine import cli
from dpsql.engine.accounting.ledger import Charge, Ledger
from dpsql.engine.accounting.ledger_binding import LedgerBinding
from dpsql.engine.errors import LedgerError
from dpsql.engine.result import AnswerCost
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import create_ledger, record_charge

BINDING = LedgerBinding(budget=4.0, k=10, eta=0.001)


def _charged_ledger(path: Path, n: int = 5, binding: LedgerBinding = BINDING) -> float:
    """A ledger with n charges of 0.1; returns the total."""
    ledger = Ledger(create_ledger(path, binding), binding)
    for i in range(n):
        record_charge(ledger, Charge("a", f"q{i}", AnswerCost(1.0, 0.1, "auto", binding.k, binding.eta), ()))
    total = ledger.spent_dp()
    ledger.close()
    return total


def _checkpointed_bytes(path: Path) -> bytes:
    """The ledger as one file (WAL folded in), as a backup tool would copy it."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes()


@pytest.mark.parametrize("cut", ["empty", 50, 100, 4096, "half", "last-page"])
def test_truncated_ledger_is_refused_and_left_alone(tmp_path, cut):
    path = tmp_path / "ledger.sqlite"
    _charged_ledger(path, n=300)
    data = _checkpointed_bytes(path)
    size = {"empty": 0, "half": len(data) // 2, "last-page": len(data) - 4096}.get(cut, cut)
    path.write_bytes(data[:size])
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerError, match="empty|corrupted or truncated") as info:
        Ledger(path, BINDING)
    assert "restore it from a backup" in str(info.value)
    assert path.read_bytes() == data[:size], "the damaged ledger must not be rewritten"


def test_garbage_and_foreign_files_are_refused(tmp_path):
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(os.urandom(8192))
    with pytest.raises(LedgerError, match="corrupted or truncated"):
        Ledger(garbage, BINDING)
    foreign = tmp_path / "foreign.sqlite"
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE charges (x)")
        conn.commit()
    with pytest.raises(LedgerError, match="not a dpsql ledger"):
        Ledger(foreign, BINDING)
    with pytest.raises(LedgerError, match="is a directory"):
        Ledger(tmp_path, BINDING)
    with pytest.raises(LedgerError, match="is not a directory"):
        Ledger(garbage / "ledger.sqlite", BINDING, create=True)


def test_tampered_charge_is_refused(tmp_path):
    path = tmp_path / "ledger.sqlite"
    _charged_ledger(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE charges SET epsilon_dp = 1e308 WHERE id = 1")
        conn.commit()
    with pytest.raises(LedgerError, match="invalid epsilon_dp"):
        Ledger(path, BINDING)


def test_a_crash_while_creating_leaves_no_ledger_behind(tmp_path):
    """Creation happens under a temporary name: a stray one does not count as a ledger."""
    (tmp_path / ".ledger.sqlite.0123456789ab.creating").write_bytes(b"")
    ledger = Ledger(tmp_path / "ledger.sqlite", BINDING, create=True)
    assert ledger.spent_dp() == 0
    ledger.close()


LENIENT = [LedgerBinding(5.0, 10, 0.001), LedgerBinding(4.0, 9, 0.001),
           LedgerBinding(4.0, 10, 0.0005), LedgerBinding(3.0, 12, 0.0001)]


@pytest.mark.parametrize("lenient", LENIENT, ids=["budget-up", "k-down", "eta-down", "mixed"])
def test_lenient_policy_change_is_refused(tmp_path, lenient):
    path = tmp_path / "ledger.sqlite"
    total = _charged_ledger(path)
    with pytest.raises(LedgerError, match="this policy is more lenient"):
        Ledger(path, lenient)
    ledger = Ledger(path, BINDING)
    assert ledger.spent_dp() == total
    ledger.close()


def test_stricter_policy_change_is_recorded_and_cannot_be_undone(tmp_path):
    path = tmp_path / "ledger.sqlite"
    total = _charged_ledger(path)
    stricter = LedgerBinding(3.0, 12, 0.01)
    ledger = Ledger(path, stricter)
    assert ledger.spent_dp() == total
    ledger.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        history = conn.execute("SELECT budget, k, eta, mode FROM bindings ORDER BY id").fetchall()
    assert history == [(4.0, 10, 0.001, "auto"), (3.0, 12, 0.01, "auto")]
    with pytest.raises(LedgerError, match="is more lenient"):
        Ledger(path, BINDING)


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 60), eta=st.floats(0, 1), dk=st.integers(0, 40), deta=st.floats(0, 1),
       spent=st.floats(1e-4, 20))
def test_stricter_models_never_lower_the_transcript_level(k, eta, dk, deta, spent):
    """The rule is sound: under k' >= k and eta' >= eta the same DP spending counts as at
    least as much information leakage, so accepting a stricter model never hides spending."""
    strict_eta = eta + (1 - eta) * deta
    before = transcript_level(spent, DependenceModel(k, eta))
    after = transcript_level(spent, DependenceModel(k + dk, strict_eta))
    assert after >= before * (1 - 1e-12)


@contextlib.contextmanager
def _read_only(*paths: Path):
    """Make paths unwritable even for root (immutable flag), or by mode for other users."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a path read-only")
        flags = [subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode
                 for p in paths]
        if any(flags):
            pytest.skip("the file system does not support the immutable flag")
        try:
            yield
        finally:
            for p in paths:
                subprocess.run(["chattr", "-i", str(p)], check=True)
    else:
        modes = [p.stat().st_mode for p in paths]
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield
        finally:
            for p, mode in zip(paths, modes, strict=True):
                p.chmod(mode)


def test_read_only_ledger_file_is_refused(tmp_path):
    path = tmp_path / "ledger.sqlite"
    total = _charged_ledger(path)
    with _read_only(path), pytest.raises(LedgerError, match="cannot be written"):
        Ledger(path, BINDING)
    ledger = Ledger(path, BINDING)
    assert ledger.spent_dp() == total
    ledger.close()


def test_read_only_directory_is_refused(tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "ledger.sqlite"
    total = _charged_ledger(path)
    with _read_only(directory):
        with pytest.raises(LedgerError, match="cannot be written"):
            Ledger(path, BINDING)
        with pytest.raises(LedgerError, match="cannot create ledger"):
            Ledger(directory / "new.sqlite", BINDING, create=True)
    ledger = Ledger(path, BINDING)
    assert ledger.spent_dp() == total
    ledger.close()


def test_cli_reports_a_damaged_ledger_in_one_line(setup, capsys):
    setup.ledger.write_bytes(b"")
    with pytest.raises(SystemExit) as info:
        cli.main(["query", "--db", str(setup.db), "--policy", str(setup.policy), "--ledger",
                  str(setup.ledger), "--epsilon", "0.5", "SELECT COUNT(*) FROM people"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "is empty" in err
    assert setup.ledger.read_bytes() == b""
