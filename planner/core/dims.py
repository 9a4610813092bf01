"""A stage's parallel dimensions, and every division of a replica's figures by their degrees.

A stage runs `dp` replicas (data parallelism) of one model-parallel group of `tp` GPUs
(tensor parallelism, Shoeybi et al. 2019). Sequence parallelism (Korthikanti et al. 2022,
sec 4.2.2) splits over the sequence what TP leaves replicated; ZeRO (Rajbhandari et al.
2020) shards the model states over the dp replicas. Pipeline parallelism is the stage list
itself (planner.plan), not a field here.

The figures of one layer (model.Layer, cost.layer_time) are per replica; the methods below
are the only place they are divided by a degree: weights (`weight_share`), activations
(`activation_share`: the replicated part by the sequence split, the sharded part by tp),
the pipeline send (`boundary_share`) and the model states (`state_divisors`). Each
dimension's collectives are priced where its cost lives: TP's in cost.layer_time
(_with_tp_comm), ZeRO's and DP's in planner.cost.pricing (zero_comm, grad_reduce_s).

A new dimension (context parallelism cp, expert parallelism ep) is a field here, its factor
in `group_gpus` and in the divisions below, and one function of its collectives' cost.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageDims:
    tp: int = 1
    sequence_parallel: bool = False
    dp: int = 1  # replicas of the model-parallel group
    zero: int = 0  # ZeRO stage over the dp replicas

    # --- the GPUs ---------------------------------------------------------------------------

    @property
    def group_gpus(self) -> int:
        """GPUs of one replica (its model-parallel group)."""
        return self.tp

    @property
    def gpus(self) -> int:
        return self.group_gpus * self.dp

    def replicas_on(self, gpus: int) -> int:
        """Replicas that `gpus` GPUs hold."""
        return gpus // self.group_gpus

    @property
    def within_replica(self) -> "StageDims":
        """The dimensions that split one replica's layers (a layer's time depends on these only)."""
        if self.dp == 1 and self.zero == 0:
            return self
        return StageDims(self.tp, self.sequence_parallel)

    # --- divisions of a replica's figures ----------------------------------------------------

    def weight_share(self, params):
        """Weight parameters on one GPU of the group: 1/tp of every weight (Megatron's
        column- and row-parallel GEMMs, the vocabulary-parallel embedding and head)."""
        return params / self.tp

    def compute_share(self, flops):
        """A layer's work on one GPU of the group when nothing finer is known (a layer-profile
        entry without shapes; model.Layer.gemms splits the GEMMs themselves)."""
        return flops / self.tp

    @property
    def sequence_split(self) -> int:
        """How many ways the activations TP replicates (norms, dropout masks, block inputs)
        are split: over the sequence with sequence parallelism, else none."""
        return self.tp if self.sequence_parallel else 1

    def activation_share(self, replicated, sharded):
        """Activation bytes (or their HBM traffic) on one GPU of the group, from a replica's
        `replicated` part (outside the TP regions) and `sharded` part (inside them)."""
        return replicated / self.sequence_split + sharded / self.tp

    def boundary_share(self, nbytes):
        """What one GPU of the group sends across a pipeline boundary: 1/tp of the replica's
        output with scatter/gather (Narayanan et al. 2021, sec 4.1)."""
        return nbytes / self.tp

    @property
    def state_divisors(self) -> tuple[int, int, int]:
        """Over how many GPUs ZeRO shards (weights, gradients, optimizer states)."""
        return zero_divisors(self.zero, self.dp)


def zero_divisors(zero: int, dp: int) -> tuple[int, int, int]:
    """ZeRO (Rajbhandari et al. 2020, Figure 1): stage 1 shards the optimizer states over the
    dp replicas, stage 2 also the gradients, stage 3 also the weights."""
    return (dp if zero >= 3 else 1), (dp if zero >= 2 else 1), (dp if zero >= 1 else 1)
