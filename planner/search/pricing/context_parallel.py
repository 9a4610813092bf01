"""Which context-parallel degrees the search tries (StageDims.cp), and where their replicas fit.

The search tries cp > 1 only where it can win: sequences of at least options.cp_min_seq_len
tokens (below it attention is a small share of the work and CP only adds communication), the
runtime's kind (ring where it runs it, else all-to-all), and each degree the plan's rule allows
(dims.context_parallel_problem). A replica of tp x cp GPUs sits inside a node, or, as a CP
ring across nodes, over whole nodes of one node group.
"""

from __future__ import annotations

from ...cost.runtimes import get_runtime
from ...inputs.model import Model
from ...plan import Training, context_parallel_problem
from .stage_types import SolverOptions


def cp_choices(model: Model, training: Training, options: SolverOptions, tp: int) -> list[tuple[int, str]]:
    """(cp, kind) pairs the search tries with `tp`: cp 1, and for long sequences each degree of
    options.cp_degrees the runtime can run (cp 1 only where they hold it: `plan --top` leaves it out)."""
    out = [(1, "ring")] if 1 in options.cp_degrees else []
    if training.seq_len < options.cp_min_seq_len:
        return out
    kinds = get_runtime(training.runtime).context_parallel
    if not kinds:
        return out
    kind = "ring" if "ring" in kinds else kinds[0]
    for cp in options.cp_degrees:
        if cp > 1 and not context_parallel_problem(model, training, tp, cp, kind):
            out.append((cp, kind))
    return out


def places(node_sizes: list[tuple[int, int]], size: int) -> bool:
    """Whether replicas of `size` = tp x cp GPUs tile these (GPUs per node, nodes) pairs: inside a
    node (size divides every node's GPUs), or, on nodes of one group only, over whole nodes (size
    a multiple of the node's GPUs that divides the GPUs taken)."""
    if all(gpn % size == 0 for gpn, _ in node_sizes):
        return True
    return len(node_sizes) == 1 and size % node_sizes[0][0] == 0 and (node_sizes[0][0] * node_sizes[0][1]) % size == 0


def largest_cp(model: Model, training: Training, options: SolverOptions, tp: int, group) -> tuple[int, str]:
    """The largest context-parallel degree (and kind) the search may give this training at `tp`
    on the nodes of `group` (cp_choices, places)."""
    fits = [(cp, kind) for cp, kind in cp_choices(model, training, options, tp)
            if places([(group.gpus_per_node, group.nodes)], tp * cp)]
    return max(fits, default=(1, "ring"))
