"""The policy facts a ledger is bound to (`LedgerBinding`): budget, (k, eta) and eta per
column set, mode, privacy units, declared models and parent columns; how a policy asks for one,
how the ledger's meta table records one, and which of its fields a later policy loosens.
Spending is only meaningful under the binding it was charged under."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...calibration import DependenceModel, mode_dominates
from ...calibration.declared import models_from_json, models_json
from ..errors import LedgerError
from ..policy import (
    EtaDeclaration,
    Policy,
    declarations_from_json,
    declarations_json,
    shared_from_json,
    shared_json,
)
from ..policy_chain import unit_record
from .transcript import ScopedAccountant

LEGACY_MODE = "auto"
"""Version 2 ledgers always accounted with the tightest map, which is auto's."""


@dataclass(frozen=True)
class LedgerBinding:
    """The policy facts a ledger is bound to; spending is only meaningful under them."""

    budget: float
    k: int
    eta: float
    mode: str = LEGACY_MODE  # the policy's mode, whose map accounts for the transcript
    # Which column identifies an individual in each table, and the foreign keys a chained table
    # reaches it through (JSON; "" before it was recorded): every epsilon spent is about those
    # individuals, so it never changes under a ledger.
    units: str = ""
    eta_by_columns: str = ""  # declarations_json of the policy's eta per column set
    models: str = ""  # models_json of the policy's declared models: never changes under a ledger
    # The parent tables' columns (JSON list; "" for none), whose eta is 1 unless a declared set
    # holds them: a later policy may add to them, never drop one (that would lower their eta).
    parents: str = ""

    @property
    def model(self) -> DependenceModel:
        return DependenceModel(self.k, self.eta)

    @property
    def declarations(self) -> tuple[EtaDeclaration, ...]:
        return declarations_from_json(self.eta_by_columns)

    @property
    def shared(self) -> frozenset[str]:
        """The parent tables' columns (`table.column`)."""
        return shared_from_json(self.parents)

    def accountant(self) -> ScopedAccountant:
        """The accountant this binding defines."""
        return ScopedAccountant(self.budget, self.k, self.eta, self.mode, self.declarations,
                                models_from_json(self.models), self.shared)

    def lenient_fields(self, other: LedgerBinding) -> list[str]:
        """The fields in which `other` is more lenient than self (more budget, smaller k or eta,
        a smaller eta for some column set, a parent column dropped, a mode whose accounting map
        is not everywhere at least as large). The eta of any column set is the smallest declared
        over its supersets, else 1 for a set with a parent column and eta otherwise, so with
        eta and the parent columns no looser, comparing at `other`'s declared sets covers every
        set."""
        mode_looser = not mode_dominates(other.mode, self.mode, other.model)
        mine, theirs = self.accountant(), other.accountant()
        sets_looser = any(theirs.scope(d.columns).eta < mine.scope(d.columns).eta
                          for d in theirs.eta_by_columns)
        return [name for name, looser in (("budget", other.budget > self.budget),
                                          ("k", other.k < self.k),
                                          ("eta", other.eta < self.eta),
                                          ("eta_by_columns", sets_looser),
                                          ("parents", not self.shared <= other.shared),
                                          ("mode", mode_looser)) if looser]


def binding_of(policy: Policy) -> LedgerBinding:
    """The ledger binding a policy asks for: its budget, dependence model (with its eta per
    column set), mode, the column that identifies an individual in each table (with the chain
    of foreign keys a chained table reaches it through) and the parent tables' columns."""
    units = json.dumps({name: unit_record(table) for name, table in policy.tables.items()},
                       sort_keys=True)
    return LedgerBinding(policy.budget_epsilon, policy.k, policy.eta, policy.mode, units,
                         declarations_json(policy.eta_by_columns), models_json(policy.models),
                         shared_json(policy.shared_columns))


def binding_from_meta(meta: dict[str, str], path: Path) -> LedgerBinding:
    """The binding recorded in a ledger's meta table."""
    try:
        declared = meta.get("eta_by_columns", "")
        declarations_from_json(declared)  # refuse a record that does not parse
        shared_from_json(meta.get("parents", ""))  # refuse a record that does not parse
        return LedgerBinding(float(meta["budget"]), int(meta["k"]), float(meta["eta"]),
                             meta.get("mode", LEGACY_MODE), meta.get("units", ""), declared,
                             meta.get("models", ""), meta.get("parents", ""))
    except (KeyError, ValueError, TypeError):
        raise LedgerError(f"ledger {path} has no valid budget, k and eta; restore it "
                          "from a backup") from None


def binding_meta(binding: LedgerBinding) -> dict[str, str]:
    """The meta table's record of a binding (`binding_from_meta` reads it back)."""
    meta = {"budget": repr(binding.budget), "k": str(binding.k), "eta": repr(binding.eta),
            "mode": binding.mode, "eta_by_columns": binding.eta_by_columns,
            "models": binding.models}
    return meta | ({"units": binding.units} if binding.units else {}) \
        | ({"parents": binding.parents} if binding.parents else {})
