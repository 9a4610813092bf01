"""The family merge's Pareto front (planner.search.pricing.stage_types.pareto_front) keeps, per block count,
exactly the configurations no other dominates in (tau, X), by rising tau: brute force is the oracle."""

import numpy as np

from planner.search.pricing.stage_types import INF, pareto_front


def brute_force(taus: np.ndarray, xs: np.ndarray) -> list[list[int]]:
    """Per column, the rows no feasible row dominates (no worse in both, better in one or equal
    and earlier), by tau then row."""
    out = []
    for c in range(taus.shape[1]):
        kept = []
        for a in range(taus.shape[0]):
            if not np.isfinite(xs[a, c]):
                continue
            if not any(np.isfinite(xs[b, c]) and b != a and taus[b, c] <= taus[a, c] and xs[b, c] <= xs[a, c]
                       and (taus[b, c] < taus[a, c] or xs[b, c] < xs[a, c] or b < a)
                       for b in range(taus.shape[0])):
                kept.append(a)
        out.append(sorted(kept, key=lambda a: (taus[a, c], a)))
    return out


def test_pareto_front_keeps_exactly_the_undominated_configs_by_tau_as_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(400):
        m, columns = int(rng.integers(1, 7)), int(rng.integers(1, 5))
        # few distinct values: many ties in tau, in X and in both
        taus = rng.integers(0, 3, (m, columns)).astype(float)
        xs = rng.integers(0, 3, (m, columns)).astype(float)
        xs[rng.random((m, columns)) < 0.25] = INF  # infeasible there (X infinite), as Problem prices it
        taus = np.where(np.isfinite(xs), taus, INF)
        order, count = pareto_front(taus, xs)
        expected = brute_force(taus, xs)
        for c in range(columns):
            assert list(order[:count[c], c]) == expected[c]
