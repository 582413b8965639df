"""The books: what a transcript spent (DP spending S, the columns U its answers read and the
spending per time point) and who must admit a charge on it. The ledger returns them, for the
whole ledger and for one analyst's answers; the accountants read them: a transcript reading U
is L(S; k, eta_U)-private (docs/theory.md §11, §14)."""

from __future__ import annotations

from dataclasses import dataclass

from ...calibration import guarantee
from ...calibration.declared import SeriesPoints, SeriesSpend
from .transcript import AnswerMap, ScopedAccountant, TimeSpend, union


@dataclass(frozen=True)
class Books:
    """DP spending S, the columns U read so far (None: every column), the spending per time
    point and who must admit a charge (none as the ledger returns them: `Bookkeeper.books`)."""

    spent: float
    read: frozenset[str] | None
    # eps_dp per time point of the answers charged per time point; None once an answer that
    # read a column was not (docs/theory.md §14: a chain then no longer covers the transcript)
    times: TimeSpend | None = None
    accountants: tuple[ScopedAccountant, ...] = ()

    def after(self, new: float, columns: frozenset[str],
              times: tuple[int, ...] | None) -> Books:
        """The books once an answer of eps_dp `new` reading `columns` (at the time points
        `times`, for a chain answer) is charged."""
        spend = self.times
        if spend is not None and times is not None:
            kind = SeriesSpend if isinstance(spend, SeriesSpend) or \
                isinstance(times, SeriesPoints) else dict
            spend = kind({t: spend.get(t, 0.0) + (new if t in times else 0.0)
                          for t in set(spend) | set(times)})
        elif columns:
            spend = None
        return Books(self.spent + new, union(self.read, columns), spend, self.accountants)

    def level(self) -> float:
        """The transcript's level, the strictest count."""
        return max(a.at(self.read, self.times).level(self.spent) for a in self.accountants)

    def levels(self, new: float, columns: frozenset[str],
               times: tuple[int, ...] | None = None) -> tuple[float, float]:
        """The transcript level before, and after an answer of eps_dp `new` reading `columns`,
        the strictest count."""
        return self.level(), self.after(new, columns, times).level()

    def admits(self, new: float, columns: frozenset[str],
               times: tuple[int, ...] | None = None) -> bool:
        """True if every accountant admits an answer of eps_dp `new` reading `columns`."""
        after = self.after(new, columns, times)
        return all(a.at(after.read, after.times).admits(self.spent, new)
                   for a in self.accountants)

    def largest_epsilon(self, mode: str, columns: frozenset[str],
                        answer: AnswerMap | None = None,
                        chain: tuple[float, tuple[int, ...]] | None = None,
                        times: tuple[int, ...] | None = None) -> float:
        """The largest epsilon a query reading `columns`, calibrated under `mode` (under a
        declared model: `answer(query model)` its level at an eps_dp), can ask. A chain
        answer (`chain`: the model's cap and the answer's time points) raises the level
        through its time points, not through S alone: its largest eps_dp is the one admission
        admits, found by bisection (admission is monotone in it).
        Otherwise `times` are the answer's time points (None: it has none; an answer reading a
        column without them takes the transcript out of the models needing them)."""
        after = union(self.read, columns)
        if answer is not None and chain is not None:
            _, times = chain
            room = self._room(columns, times)
            return 0.0 if room <= 0.0 else min(answer(a.model(columns))(room)
                                                for a in self.accountants)
        spend = self.after(0.0, columns, times).times  # None if this answer leaves a chain's
        chained = spend is not None and any(m.chain is not None for a in self.accountants
                                            for m in a.at(after, spend).exact)
        if spend is not None and (columns or chained):  # per time point: admission's, bisected
            room = self._room(columns, times)
            return min(guarantee(mode, room, a.model(columns)) if answer is None
                       else answer(a.model(columns))(room) for a in self.accountants) \
                if room > 0.0 else 0.0
        return min(a.at(after, spend).largest_epsilon(  # or a Gaussian model's time spending
            self.spent, mode, a.model(columns), None if answer is None else answer(a.model(columns)))
            for a in self.accountants)

    def _room(self, columns: frozenset[str], times: tuple[int, ...] | None) -> float:
        """The largest eps_dp `admits` admits on top of the books (admission is monotone in it)."""
        high = 1.0
        while self.admits(high, columns, times):
            if high > 1e9:
                return high
            high *= 2.0
        low = 0.0
        for _ in range(200):
            mid = (low + high) / 2.0
            if mid in (low, high):
                break
            low, high = (mid, high) if self.admits(mid, columns, times) else (low, mid)
        return low
