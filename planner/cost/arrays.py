"""np.minimum / np.maximum that keep scalars scalar: the cost model's figures are Python numbers
for one plan and numpy arrays over a block count in the search (planner.cost.pricing)."""

from __future__ import annotations

import numpy as np


def minimum(a, b):
    """np.minimum that keeps scalars scalar."""
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return min(a, b)
    return np.minimum(a, b)


def maximum(a, b):
    """np.maximum that keeps scalars scalar."""
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return max(a, b)
    return np.maximum(a, b)
