"""A stage's parallel dimensions, and every division of a replica's figures by their degrees.

A stage runs `dp` replicas of one model-parallel group of `tp` GPUs, with sequence parallelism,
ZeRO over the replicas, context parallelism (`cp`, `cp_kind`) and expert parallelism (`ep`, `etp`);
pipeline parallelism is the stage list itself (planner.plan). A layer's figures (model.Layer,
cost.layer_time) are per replica; the methods here are the only place they are divided by a degree
(`weight_share`, `activation_share`, `boundary_share`, `state_divisors`, `expert_state_divisors`).
Each dimension's collectives are priced where its cost lives: TP's in cost.layer_time, ZeRO's in
cost.dp_comm.zero_comm, DP's in cost.stage_tail.grad_reduce_s, CP's in cost.context_parallel.cp_comm,
EP's in cost.moe.moe_alltoall_s. A new dimension is a field here, its factor in `group_gpus` and
the divisions, and one cost function for its collectives. The dimensions and their sources: docs/cost-model.md."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageDims:
    tp: int = 1
    sequence_parallel: bool = False
    dp: int = 1  # replicas of the model-parallel group
    zero: int = 0  # ZeRO stage over the dp replicas
    cp: int = 1  # context-parallel ranks sharing one sequence (docs/cost-model.md)
    cp_kind: str = "ring"  # "ring" (Ring Attention / Megatron CP) or "all-to-all" (Ulysses)
    ep: int = 1  # expert parallelism: ranks the routed experts are split over (from the dp replicas)
    etp: int = 0  # expert tensor parallelism; 0: as tp (Megatron's default)

    # --- the GPUs ---------------------------------------------------------------------------

    @property
    def group_gpus(self) -> int:
        """GPUs of one replica (its model-parallel group): tp x cp."""
        return self.tp * self.cp

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
        return StageDims(self.tp, self.sequence_parallel, cp=self.cp, cp_kind=self.cp_kind, ep=self.ep, etp=self.etp)

    # --- experts (Megatron-core MoE parallel folding) ----------------------------------------

    @property
    def expert_tp(self) -> int:
        """Ranks one expert's GEMMs are split over."""
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """The expert-data-parallel group: the stage's tp x cp x dp GPUs over one expert grid
        (etp x ep); the cp ranks fold into it (docs/cost-model.md, "Expert parallelism")."""
        return max(1, self.gpus // (self.expert_tp * self.ep))

    def ep_group(self, position: int) -> list[int]:
        """The expert-parallel group of the GPU at `position` among the stage's tp x cp x dp GPUs
        listed replica by replica (tp innermost, then cp: Megatron's tp-cp-dp order): Megatron-core's
        expert grid orders the same GPUs etp-ep-edp (MoE parallel folding), so the group is `ep`
        positions `etp` apart (with cp > 1 and etp = tp: a replica's cp ranks, then the next replica's)."""
        etp = self.expert_tp
        base = position - ((position // etp) % self.ep) * etp
        return [base + k * etp for k in range(self.ep)]

    def edp_group(self, position: int) -> list[int]:
        """The expert-data-parallel group of the GPU at `position` (ep_group's order): the edp
        positions etp x ep apart that hold the same experts and reduce their gradients (Megatron-core's
        expert grid etp-ep-edp; torchtitan's efsdp mesh dimension)."""
        span = self.expert_tp * self.ep
        return [position % span + k * span for k in range(self.edp)]

    def expert_problem(self, num_experts: int) -> str:
        """Why these degrees cannot run an MoE layer of `num_experts` experts ('' if they can):
        ep must divide the experts and etp x ep the stage's tp x dp GPUs (Megatron-core's
        parallel_state checks the same over world / pp = tp x cp x dp)."""
        if self.ep == 1 and self.expert_tp == self.tp:
            return ""
        if num_experts <= 1 and self.ep > 1:
            return f"ep={self.ep} needs an MoE model (this one has no routed experts)"
        if num_experts % self.ep:
            return f"ep={self.ep} does not divide the {num_experts} experts"
        if self.gpus % (self.expert_tp * self.ep):
            grid, sizes = ("tp x cp x dp", f"{self.tp}x{self.cp}x{self.dp}") if self.cp > 1 else \
                ("tp x dp", f"{self.tp}x{self.dp}")
            return f"etp x ep = {self.expert_tp}x{self.ep} does not divide the stage's {grid} = {sizes} GPUs"
        return ""

    # --- divisions of a replica's figures ----------------------------------------------------

    def weight_share(self, params, expert_params=0.0):
        """Weight parameters on one GPU of the group: 1/tp of every weight (Megatron's
        column- and row-parallel GEMMs, the vocabulary-parallel embedding and head), of which
        the routed experts' `expert_params` are 1/(etp x ep) instead (each GPU holds
        num_experts / ep experts, each split over etp)."""
        if self.ep == 1 and self.expert_tp == self.tp:
            return params / self.tp
        return (params - expert_params) / self.tp + expert_params / (self.expert_tp * self.ep)

    def dispatch_share(self, tokens):
        """Tokens one GPU of the group routes to the experts: its context-parallel and
        sequence-parallel share of the replica's (Megatron's MoE layer takes the SP-split hidden
        states of the GPU's seq_len / cp tokens)."""
        return tokens / (self.tp * self.cp)

    def expert_gemm_rows(self, tokens, num_experts: int, top_k: int):
        """Rows of one local expert's GEMM on one GPU from a replica's `tokens`: the replica's
        token copies (tokens x top_k) spread evenly over the experts; a GPU's tp share of them
        is gathered over etp and comes from ep ranks (Megatron's alltoall token dispatcher; with
        cp > 1 `tokens` are the GPU's seq_len / cp, StageDims.local_seq_len),
        so the GPU runs num_experts / ep GEMMs of these rows with n / etp columns: FLOPs
        tokens x top_k x (expert FLOPs) / tp, as without EP."""
        return tokens * top_k * self.expert_tp * self.ep / (self.tp * num_experts)

    def compute_share(self, flops):
        """A layer's work on one GPU of the group when nothing finer is known (a layer-profile
        entry without shapes; model.Layer.gemms splits the GEMMs themselves)."""
        return flops / (self.tp * self.cp)

    def head_share(self, width):
        """Width of an attention projection (q, k, v, output) on one TP rank: Megatron splits the
        heads (and the query groups) over tp (Shoeybi et al. 2019, sec 3)."""
        return width / self.tp

    def local_seq_len(self, seq_len: int) -> int:
        """Tokens of one sequence on one GPU: CP splits each sequence into cp parts (Megatron-core
        context_parallel docs; the load-balanced layout needs seq_len divisible by 2 cp)."""
        return seq_len // self.cp

    def attention_share(self, flops):
        """The attention-score work of one GPU from its TP rank's work over the whole sequence:
        1/cp of it, with causal load balancing (ring: each rank's two chunks i and 2cp-1-i see
        equal causal work, Megatron-core context_parallel docs) or a head split (Ulysses:
        every rank attends the full sequence with heads / (tp cp), Jacobs et al. 2023, sec 3)."""
        return flops / self.cp

    @property
    def grad_reduce_ranks(self) -> int:
        """Over how many GPUs one weight's gradient is reduced: the dp replicas x the cp ranks
        that hold the same weights (Megatron-core: the data-parallel group with cp)."""
        return self.dp * self.cp

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
        """Over how many GPUs ZeRO shards (weights, gradients, optimizer states): the dp
        replicas x the cp ranks holding the same weights (Megatron's distributed optimizer and
        torchtitan's FSDP shard over dp x cp)."""
        return zero_divisors(self.zero, self.grad_reduce_ranks)

    @property
    def expert_state_divisors(self) -> tuple[int, int, int]:
        """Over how many GPUs ZeRO shards the routed experts' (weights, gradients, optimizer
        states): the expert-data-parallel group (Megatron's distributed optimizer shards expert
        parameters over it)."""
        return zero_divisors(self.zero, self.edp)


def zero_divisors(zero: int, dp: int) -> tuple[int, int, int]:
    """ZeRO (Rajbhandari et al. 2020, Figure 1): stage 1 shards the optimizer states over the
    dp replicas, stage 2 also the gradients, stage 3 also the weights."""
    return (dp if zero >= 3 else 1), (dp if zero >= 2 else 1), (dp if zero >= 1 else 1)


CP_KINDS = ("ring", "all-to-all")


def context_parallel_problem(seq_len: int, attention: str, heads: int | None, tp: int, cp: int, cp_kind: str) -> str:
    """Why `cp` ranks of kind `cp_kind` cannot share sequences of `seq_len` tokens ('' when they can):
    ring CP's causal load balancing cuts a sequence into 2 cp chunks (Megatron-core
    context_parallel docs); Ulysses splits the heads over tp x cp (Jacobs et al. 2023, sec 3);
    both run on a flash-attention kernel (Megatron-core CP needs Transformer Engine's)."""
    if cp_kind not in CP_KINDS:
        return f"unknown context-parallel kind {cp_kind!r} (known: {', '.join(CP_KINDS)})"
    if cp <= 1:
        return ""
    chunks = 2 * cp if cp_kind == "ring" else cp
    if seq_len % chunks:
        return (f"sequence length {seq_len:,} does not split into {chunks} equal chunks "
                f"({cp_kind} context parallelism over cp={cp})")
    if attention != "flash":
        return "context parallelism needs flash attention (--attention flash)"
    if cp_kind == "all-to-all" and heads is not None and heads % (tp * cp):
        return f"all-to-all (Ulysses) context parallelism needs the {heads} heads divisible by tp x cp = {tp * cp}"
    return ""
