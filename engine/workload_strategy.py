"""Measurement strategies for a workload of linear counting queries over a public contingency
domain, their expected error before anything is spent, and least-squares answers
(docs/theory.md §18). Pure numerics over public shapes: nothing here reads data."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

IDENTITY_LIMIT = 100_000  # the full contingency table is a candidate up to this many cells
MARGINAL_LIMIT = 20_000  # weighted marginals are a candidate up to this many cells
HIERARCHY_LIMIT = 1_024  # a hierarchy (solved by an explicit pseudo-inverse) up to this many
BRANCHING = 2  # the hierarchical strategy's tree


@dataclass(frozen=True)
class Strategy:
    """What is measured: y = A x over the contingency vector x (C order over `sizes`). The
    measurement's L1 sensitivity is `l1` (A's largest column sum of |A|) times x's. Answers
    are least squares, W A⁺ y; `coefficients(W)` = W A⁺ gives each answer cell as a
    combination of the measurements."""

    name: str  # "identity", "weighted marginals" or "hierarchical ranges"
    detail: str  # what it measures, in words
    sizes: tuple[int, ...]
    sets: tuple[tuple[int, ...], ...] = ()  # weighted marginals: the attribute sets
    weights: tuple[float, ...] = ()  # and their weights (summing to the L1 norm, 1)
    matrix: np.ndarray | None = field(default=None, compare=False)  # an explicit A (hierarchy)
    pinv: np.ndarray | None = field(default=None, compare=False)  # its pseudo-inverse

    @property
    def l1(self) -> float:
        if self.matrix is not None:
            return float(np.abs(self.matrix).sum(axis=0).max())
        return float(sum(self.weights)) if self.sets else 1.0

    def measure(self, x: np.ndarray) -> np.ndarray:
        """The strategy's exact answers A x."""
        x = np.asarray(x, dtype=float)
        if self.matrix is not None:
            return self.matrix @ x
        if not self.sets:
            return x
        cube = x.reshape(self.sizes)
        return np.concatenate([w * _marginal(cube, s, len(self.sizes)).ravel()
                               for w, s in zip(self.weights, self.sets, strict=True)])

    def coefficients(self, query: np.ndarray) -> np.ndarray:
        """W A⁺: one row per answer cell, one column per measurement."""
        if self.matrix is not None:
            assert self.pinv is not None
            return query @ self.pinv
        if not self.sets:
            return query
        spread = self._gram_pinv(query.T)  # (AᵀA)⁺ Wᵀ, n × cells
        cube = spread.reshape(*self.sizes, -1)
        blocks = [w * _marginal(cube, s, len(self.sizes)).reshape(-1, query.shape[0])
                  for w, s in zip(self.weights, self.sets, strict=True)]
        return np.vstack(blocks).T  # W (AᵀA)⁺ Aᵀ = W A⁺

    def estimate(self, measured: np.ndarray, query: np.ndarray) -> np.ndarray:
        """The least-squares answer W A⁺ y of a query (post-processing of y)."""
        if self.matrix is not None:
            assert self.pinv is not None
            return query @ (self.pinv @ measured)
        if not self.sets:
            return query @ measured
        back = np.zeros(self.sizes)
        start = 0
        for w, s in zip(self.weights, self.sets, strict=True):
            shape = tuple(n if i in s else 1 for i, n in enumerate(self.sizes))
            size = math.prod(shape)
            back = back + w * measured[start:start + size].reshape(shape)  # Aᵀ y
            start += size
        return query @ self._gram_pinv(back.reshape(-1, 1))[:, 0]

    def _gram_pinv(self, columns: np.ndarray) -> np.ndarray:
        """(AᵀA)⁺ applied to columns: Σ_S P_S / λ_S over the residual spaces S where λ_S > 0."""
        cube = columns.reshape(*self.sizes, -1)
        out = np.zeros_like(cube)
        for subset, part in _residuals(cube, len(self.sizes)):
            lam = _eigenvalue(self.sizes, self.sets, self.weights, subset)
            if lam > 0:
                out += part / lam
        return out.reshape(columns.shape)


def _marginal(cube: np.ndarray, kept: tuple[int, ...], d: int) -> np.ndarray:
    """Sums over the attributes (the leading d axes) not kept; trailing axes stay."""
    return cube.sum(axis=tuple(i for i in range(d) if i not in kept), keepdims=True)


def _residuals(cube: np.ndarray, d: int) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """(S, P_S v) for every attribute subset S: P_S is, on each attribute, I - J/n in S and J/n
    outside it (the projectors sum to the identity). P_S v is constant along the attributes
    outside S, so it is returned with size 1 there (it broadcasts back)."""
    parts: list[tuple[tuple[int, ...], np.ndarray]] = [((), cube)]
    for axis in range(d):
        split = []
        for subset, part in parts:
            mean = part.mean(axis=axis, keepdims=True)
            split += [(subset, mean), (subset + (axis,), part - mean)]
        parts = split
    return parts


def _eigenvalue(sizes: tuple[int, ...], sets: tuple[tuple[int, ...], ...],
                weights: tuple[float, ...], subset: tuple[int, ...]) -> float:
    """AᵀA's eigenvalue on the residual space of S: Σ_{M ⊇ S} w_M² Π_{i ∉ M} n_i."""
    return sum(w * w * math.prod(n for i, n in enumerate(sizes) if i not in m)
               for m, w in zip(sets, weights, strict=True) if set(subset) <= set(m))


def hierarchy_matrix(n: int) -> np.ndarray:
    """The intervals of a BRANCHING-ary tree over n ordered cells: leaves, their parents, ...,
    the total (each cell is in one interval per level)."""
    rows: list[np.ndarray] = []
    width = 1
    while True:
        for start in range(0, n, width):
            row = np.zeros(n)
            row[start:start + width] = 1.0
            rows.append(row)
        if width >= n:
            return np.array(rows)
        width *= BRANCHING


def candidates(sizes: tuple[int, ...], sets: list[tuple[int, ...]],
               queries: list[np.ndarray], ordered: bool) -> list[Strategy]:
    """The strategies worth comparing for these queries (each W over the domain `sizes`,
    reading the attribute sets `sets`): the full table when small, weighted marginals on the
    queries' attribute sets, and a hierarchy when the domain is one ordered attribute."""
    n = math.prod(sizes)
    found = []
    if n <= IDENTITY_LIMIT:
        found.append(Strategy("identity", f"all {n} cells of the contingency table", sizes))
    unique = tuple(sorted(set(sets), key=lambda s: (len(s), s)))
    if n <= MARGINAL_LIMIT and unique and unique != (tuple(range(len(sizes))),):
        weights = marginal_weights(sizes, unique, queries)
        found.append(Strategy("weighted marginals", ", ".join(
            f"{'x'.join(str(sizes[i]) for i in s) or 'total'} weight {w:.3g}"
            for w, s in zip(weights, unique, strict=True)), sizes, unique, tuple(weights)))
    if ordered and len(sizes) == 1 and 4 <= n <= HIERARCHY_LIMIT:
        tree = hierarchy_matrix(n)
        found.append(Strategy("hierarchical ranges",
                              f"{tree.shape[0]} intervals of a {BRANCHING}-ary tree over {n} bins",
                              sizes, matrix=tree, pinv=np.linalg.pinv(tree)))
    return found


def _projected(sizes: tuple[int, ...], queries: list[np.ndarray]) -> dict[tuple[int, ...], float]:
    """c_S = Σ_q ||P_S W_qᵀ||² for every attribute subset S: the weight-free part of the
    marginals' expected total squared error over every answer cell."""
    out: dict[tuple[int, ...], float] = {}
    for q in queries:
        for subset, part in _residuals(q.T.reshape(*sizes, -1), len(sizes)):
            spread = math.prod(n for i, n in enumerate(sizes) if i not in subset)
            out[subset] = out.get(subset, 0.0) + spread * float(np.square(part).sum())
    return out


def marginal_weights(sizes: tuple[int, ...], sets: tuple[tuple[int, ...], ...],
                     queries: list[np.ndarray]) -> list[float]:
    """Weights (summing to 1, the strategy's L1 norm) minimising the total squared error over
    every answer cell under weighted marginals on `sets`: Σ_S c_S / λ_S(w)."""
    c = _projected(sizes, queries)
    needed = [s for s, v in c.items() if v > 1e-9]
    table = np.array([[math.prod(n for i, n in enumerate(sizes) if i not in m)
                       if set(s) <= set(m) else 0.0 for m in sets] for s in needed])
    costs = np.array([c[s] for s in needed])

    def error(theta: np.ndarray) -> float:
        w = np.exp(theta - theta.max())
        w = w / w.sum()
        return float(np.sum(costs / (table @ (w * w))))

    start = np.zeros(len(sets))
    best = optimize.minimize(error, start, method="L-BFGS-B")
    theta = best.x if best.fun <= error(start) else start
    w = np.exp(theta - theta.max())
    return [float(v) for v in w / w.sum()]


def squared_errors(strategy: Strategy, query: np.ndarray) -> np.ndarray:
    """Each answer cell's Σ_j u_j² (its variance is 2 b² times this under Laplace(b) noise)."""
    return np.square(strategy.coefficients(query)).sum(axis=1)
