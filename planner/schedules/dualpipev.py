"""DualPipeV (DeepSeek-AI 2024, DeepSeek-V3 technical report sec 3.2.1, DualPipe; its "cut-in-half"
V form, github.com/deepseek-ai/DualPipe README; torch.distributed.pipelining ScheduleDualPipeV,
torchtitan's "DualPipeV"): ZB-V's placement (two chunks per rank as a V, rank k holding chunks k
and 2p - 1 - k) and split backward, whose steady state runs a forward chunk of one micro-batch
beside a backward chunk of another (F&B), each one's expert-parallel dispatch and combine under
the other's compute (Schedule.overlaps_ep_comm). The README's bubble over 2p stages on p ranks is
(p - 1)(F&B + B - 3W) in chunk passes, B the whole backward: with F&B the two chunks' compute run
back to back (only communication overlaps), per rank of two chunks (F + 2 B_in - W) / 2, B_in
the input gradient; floored at ZB-V's (p - 1) chunk forwards. Memory as ZB-V's (the README:
parameters 2x per device, activations PP + 1 chunk micro-batches, zbv.ZeroBubbleV.chunk_in_flight),
and at least 2p micro-batches (ScheduleDualPipeV: "at least as many microbatches as stages").

Runtimes: torchtitan (pipeline_parallel_schedule DualPipeV; with expert parallelism its
pipeline_parallel_expert_parallel_overlap hooks the dispatch and combine, and refuses activation
checkpointing beside them: torchtitan/distributed/dual_pipe_v.py get_dual_pipe_v_flag); not
Megatron-LM nor DeepSpeed."""

from __future__ import annotations

from dataclasses import dataclass

from .zbv import ZeroBubbleV


@dataclass(frozen=True)
class DualPipeV(ZeroBubbleV):
    def fewest_microbatches(self, pp: int, virtual_stages: int) -> int:
        return 2 * pp  # one per stage of the V

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int, wgrad_s: float = 0.0,
                  forward_s: float = 0.0) -> float:
        # (F&B + B - 3W) per chunk, each half the rank's, with rank_s = F + B_in + W, B = B_in + W and
        # F&B = F + B: (F + 2 B_in - W) / 2 = (2 rank_s - F - 3 W) / 2; never below a chunk forward
        # (zbv.ZeroBubbleV.latency_s: the last rank's idle start)
        return max(forward_s, 2 * rank_s - forward_s - 3 * wgrad_s) / 2

    def title(self, virtual_stages: int) -> str:
        return "DualPipeV"


SCHEDULE = DualPipeV(
    "dualpipev", searched=False, uniform_candidate=True, min_virtual_stages=2, max_virtual_stages=2, min_pp=2,
    split_backward=True, runs_in_planner_run=False, overlaps_ep_comm=True,
    # without EP: ZB-V's placement, memory and per-micro-batch times, a latency larger by a backward
    # chunk (DualPipeV.latency_s), half the micro-batches needed; torchtitan refuses both under compile
    without_ep_as="zbv",
    drawn_as="ZB-H1 over each rank's two chunks together")
