"""What a pipeline schedule tells the planner (planner.schedules): the base every schedule
module subclasses. Pure: imports nothing of the planner, so evaluate, the search and show can
all ask it."""

from __future__ import annotations

from dataclasses import dataclass

Order = list[tuple[str, int]]  # ("F", "B" or "W", micro-batch), in the order one rank runs them
# a split backward (Qi et al. 2023, Zero Bubble, sec 2): "B" the input gradient, "W" the weight
# gradient; a schedule that does not split runs "B" as the whole backward


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: its name in plan files and `--schedule`, the virtual stages
    (chunks per rank) it takes and whether the search plans it. Which runtimes run it is theirs
    to say (planner.cost.runtimes: Capability.schedules)."""

    name: str
    searched: bool  # the plan search considers it
    # not searched exactly, but priced by the plan search as uniform configurations (even
    # layers, one tp/dp/ZeRO/recompute) where the runtime runs it (planner.search.uniform)
    uniform_candidate: bool = False
    min_virtual_stages: int = 1
    max_virtual_stages: int | None = 1  # None: no upper limit
    min_pp: int = 1
    drawn_as: str | None = None  # the approximation `planner show` draws it with, if any
    split_backward: bool = False  # runs the weight-gradient pass W apart from B (order has "W" ops)
    runs_in_planner_run: bool = True  # the reference runtime (planner.runner) executes its order
    # runs one micro-batch's forward beside another's backward, each one's expert-parallel
    # all-to-all under the other's compute (DualPipe's F&B): its plans are priced with
    # CostParams.moe_a2a_overlap (planner.cost.replica_pricer)
    overlaps_ep_comm: bool = False
    # the schedule that prices no slower, holds no more memory and runs wherever this one does when
    # there is no expert-parallel all-to-all to hide ("" none): the uniform scan leaves this one out
    # at ep 1 where that one is in its space (planner.search.uniform)
    without_ep_as: str = ""
    needs_ep: bool = False  # runs only with expert parallelism (a plan of ep 1 is refused)
    refused_recompute: tuple[str, ...] = ()  # the recompute modes it does not run with
    refused_dtypes: tuple[str, ...] = ()  # the training dtypes it does not run with
    max_mtp_layers: int | None = None  # the most multi-token-prediction layers it runs with (None: any)
    mtp_needs_pp: bool = False  # runs multi-token-prediction layers only with pipelining (pp > 1)
    # its all-to-all overlap needs several CUDA connections (streams), while Megatron-core's TP overlap under
    # the weight-gradient GEMM needs one (CUDA_DEVICE_MAX_CONNECTIONS=1) before Blackwell (Megatron-LM
    # arguments.py: "try not to use tensor model parallelism or context parallelism with
    # overlap_moe_expert_parallel_comm"): there its plans are priced without the TP overlap
    # (planner.cost.replica_pricer.schedule_params)
    connections_over_tp_overlap: bool = False

    def accepts_virtual_stages(self, virtual_stages: int) -> bool:
        return self.min_virtual_stages <= virtual_stages and (
            self.max_virtual_stages is None or virtual_stages <= self.max_virtual_stages)

    def accepts_layout(self, pp: int, virtual_stages: int) -> bool:
        """Whether it runs `pp` pipeline ranks of `virtual_stages` chunks each (min_pp and the V range)."""
        return pp >= self.min_pp and self.accepts_virtual_stages(virtual_stages)

    def layout_rule(self) -> str:
        """accepts_layout in words, for the messages that refuse a layout."""
        most = "" if self.max_virtual_stages is None else f" and at most {self.max_virtual_stages}"
        return f"at least {self.min_pp} pipeline ranks and {self.min_virtual_stages}{most} virtual stages"

    def refusals(self, recompute_modes, dtype: str, mtp_layers: int, pp: int) -> list[tuple[str, str]]:
        """(plan field, why) for each setting it does not run with among the stages' recompute modes, the
        dtype, the model's MTP layers and the depth (refused_recompute, refused_dtypes, max_mtp_layers,
        mtp_needs_pp): planner.plan.structure's problems, the uniform scan's filter (runs_with)."""
        out = []
        refused = sorted(set(recompute_modes) & set(self.refused_recompute))
        if refused:
            out.append(("training.schedule", f"{self.name} runs without {refused[0]} recomputation "
                        f"(stages recompute {refused[0]})"))
        if dtype in self.refused_dtypes:
            out.append(("training.dtype", f"{self.name} does not train in {dtype}"))
        if self.max_mtp_layers is not None and mtp_layers > self.max_mtp_layers:
            out.append(("training.schedule", f"{self.name} runs at most {self.max_mtp_layers} MTP layer "
                        f"(the model has {mtp_layers})"))
        if self.mtp_needs_pp and mtp_layers and pp < 2:
            out.append(("training.schedule", f"{self.name} runs MTP layers only with pipelining (pp 1; the "
                        f"model has {mtp_layers})"))
        return out

    def runs_with(self, recompute: str, dtype: str, mtp_layers: int, pp: int) -> bool:
        """Whether it runs a uniform plan of that recompute mode, dtype, MTP layer count and depth."""
        return not self.refusals((recompute,), dtype, mtp_layers, pp)

    def fewest_microbatches(self, pp: int, virtual_stages: int) -> int:
        """The fewest micro-batches each replica must run (planner.plan.structure): a split backward's
        bubbles hold with at least p (Qi et al. 2023, sec 3.1); otherwise one."""
        return pp if self.split_backward else 1

    def chunks_per_rank(self, virtual_stages: int) -> int:
        """Model chunks each pipeline rank runs: 1 unless the schedule interleaves."""
        return 1

    def chunk_rank(self, chunk_index: int, pp: int, virtual_stages: int) -> int:
        """The pipeline rank of chunk (stage) `chunk_index`: round-robin over the ranks."""
        return chunk_index % pp

    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        """Micro-batches whose activations a pipeline rank holds at its peak, in units of one
        micro-batch through all of that rank's layers."""
        raise NotImplementedError

    def chunk_in_flight(self, pipeline_rank: int, pp: int, virtual_stages: int,
                        num_microbatches: int) -> tuple[float, ...] | None:
        """Micro-batches each of the rank's chunks holds at its peak, when they differ by chunk
        (then evaluate weighs them by each chunk's activations); None: in_flight_microbatches
        for the rank as a whole."""
        return None

    def deferred_w_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                                num_microbatches: int) -> float:
        """Micro-batches past their B whose W pass still waits at the rank's peak, each keeping
        its weight-GEMM inputs (pricing.wgrad_input_bytes); 0 unless the backward is split."""
        return 0.0

    def gradient_loops(self, virtual_stages: int) -> int:
        """How many times a step's gradients become ready, one loop of chunks at a time (1:
        all after the last backward; breadth-first: once per chunk, stage_tail.looped_reduce_s)."""
        return 1

    def zero_once_per_loop(self) -> bool:
        """Whether the ZeRO-2/3 collectives run once per loop for all its micro-batches (breadth-first)
        rather than once per micro-batch."""
        return False

    def depth_dependent(self) -> bool:
        """Whether a rank's in-flight count depends on the pipeline depth P beyond its distance
        from the end (then the search fixes P per dynamic programme)."""
        return False

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int, wgrad_s: float = 0.0,
                  forward_s: float = 0.0) -> float:
        """c_k of evaluate.pipeline_time_s: the latency of one micro-batch through a rank whose
        whole pass takes `rank_s` (of which `wgrad_s` is weight-gradient work, a split
        backward's W, and `forward_s` the forward) and whose slowest chunk `slowest_chunk_s`.
        Linear in its arguments but for ZB-V's floor (explain.latency_shares splits it by kind)."""
        return rank_s

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        """The order one pipeline rank runs its forwards and backwards in (planner show)."""
        raise NotImplementedError

    def title(self, virtual_stages: int) -> str:
        """The schedule's name in a drawing's title."""
        return self.name
