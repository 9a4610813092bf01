"""Megatron-core's combined 1F1B, the schedule of `--overlap-moe-expert-parallel-comm` (megatron-core
0.16.1 pipeline_parallel/combined_1f1b.py, combined_1f1b_schedule_for_interleaved_pipelining):
interleaved 1F1B whose steady state runs one micro-batch's forward chunk and another's backward chunk
as one step, layer by layer, so that each one's expert-parallel dispatch and combine all-to-all run
under the other's compute (DeepSeek-V3's computation-communication overlap, DeepSeek-AI 2024, sec
3.2.1): its plans are priced with CostParams.moe_a2a_overlap (Schedule.overlaps_ep_comm), and the plan
search plans it as it plans interleaved 1F1B, its stages priced so (planner.search.pricing.stage_types.
schedule_options), each with expert parallelism (Schedule.needs_ep; pricing.experts.ep_degrees). To keep
the paired forward and backward independent it runs one more forward in the warm-up
(pipeline_parallel/schedules.py get_pp_rank_microbatches: "we schedule one extra micro-batch forward
step before the 1f1b stages"). Without pipelining (combined_1f1b_schedule_for_no_pipelining) it runs
micro-batch 1's forward alone, then each next forward beside the previous backward, then the last
backward alone, on one stage of one chunk. A paired step runs forward layer i beside backward layer
L - 1 - i, each backward layer releasing its activations (models/common/model_chunk_schedule_plan.py
TransformerModelChunkSchedulePlan.run): a rank holds the warm-up's chunks and the extra one, and one
layer beyond while a pair runs, counted here as one more chunk (an upper bound, the in-flight count's
unit being a chunk): interleaved 1F1B's in-flight count plus one chunk, two micro-batches without
pipelining.

What megatron-core runs it with (transformer/transformer_config.py __post_init__, asserted there):
virtual pipeline stages where pp > 1 (accepts_layout), expert parallelism, the alltoall or flex token
dispatcher, no full recomputation nor a recompute method (selective modules are allowed), a bf16 or
fp16 model (fp8, MXFP8 and NVFP4 train with bf16 parameters), and at most one MTP layer, with
pipelining only ("Pipeline model parallel size must be larger than 1 when enabling
overlap_moe_expert_parallel_comm with MTP layer") (Schedule.needs_ep, refused_recompute, refused_dtypes,
max_mtp_layers, mtp_needs_pp: planner.plan.structure checks them).

Its overlap runs the all-to-all on a stream of its own, which needs several CUDA connections, while
Megatron-core's TP all-reduce under the weight-gradient GEMM is ordered by CUDA_DEVICE_MAX_CONNECTIONS=1
before Blackwell (Megatron-LM arguments.py warns against TP or CP beside it there): below Blackwell its
plans are priced without the TP overlap (Schedule.connections_over_tp_overlap) and the Megatron export
launches them with 32 connections."""

from __future__ import annotations

from dataclasses import dataclass

from .interleaved import Interleaved, interleaved_warmup


@dataclass(frozen=True)
class Combined1F1B(Interleaved):
    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        """Interleaved 1F1B's warm-up, the extra chunk forward and the paired step's layer counted as a
        chunk (module docstring), each chunk 1/v of the rank's layers."""
        v, m = virtual_stages, num_microbatches
        return min(m * v, interleaved_warmup(pipeline_rank, pp, v, m) + 2) / v

    def accepts_layout(self, pp: int, virtual_stages: int) -> bool:
        """One chunk without pipelining, two or more chunks per rank with it (module docstring)."""
        return virtual_stages == 1 if pp == 1 else virtual_stages >= 2

    def layout_rule(self) -> str:
        return "one pipeline rank of one chunk, or 2 or more pipeline ranks of 2 or more virtual stages"

    def title(self, virtual_stages: int) -> str:
        return f"combined 1F1B (V={virtual_stages})"


SCHEDULE = Combined1F1B(
    "combined-1f1b", searched=True, uniform_candidate=True, min_virtual_stages=1, max_virtual_stages=None,
    min_pp=1, runs_in_planner_run=False, overlaps_ep_comm=True, needs_ep=True, refused_recompute=("full", "block"),
    refused_dtypes=("fp32",), max_mtp_layers=1, mtp_needs_pp=True, connections_over_tp_overlap=True,
    # without EP: interleaved 1F1B's plan, one warm-up forward less held
    without_ep_as="interleaved",
    drawn_as="1F1B over each rank's chunks together")
