"""Megatron-LM as of SC'21 (Narayanan et al. 2021): the software of the 20 reference runs.

It reduced gradients after the backward pass and ran the TP all-reduces synchronously (both
overlaps arrived in 2022-23); standard attention with the fused scale-mask-softmax kernel;
fused bias-GeLU and bias-dropout-add (factor 1).
"""

from . import megatron
from .base import Runtime
from .spec import Capability, RuntimeSpec

SPEC = RuntimeSpec(
    pricing=Runtime(
        name="megatron-2021", title="Megatron-LM (SC'21)",
        overlap_grad_reduce=False, overlap_tp_comm=False, attention="standard", tf32_matmul=True,
        elementwise_traffic_factor=1.0, layer_overhead_s=0.0,
        # megatron/p2p_communication.py _communicate: torch.distributed.batch_isend_irecv, then wait on
        # every request (schedules.py forward_backward_pipelining_without_interleaving): blocking
        pipeline_p2p=(("1f1b", "exchange"),),
        # megatron/model/transformer.py ParallelAttention: unfused QK^T, fused scale-mask-softmax, PV only
        flash_attention=(("volta", "standard"), ("turing", "standard")),
        source="Narayanan et al. 2021 (arXiv 2104.04473), Megatron-LM v2.x"),
    capability=Capability(
        runtime="megatron-2021", title="Megatron-LM (2021)", version="Megatron-LM v2 (SC'21)",
        pipeline=True, tensor_parallel=True,
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False,  # mpu/initialize.py: one tp, dp
        # megatron/model/transformer.py ParallelTransformer: num_layers // pipeline size per stage
        # (asserted divisible); the planner plans 1F1B only for it
        layer_split="equal", schedules=("1f1b",), interleaved_microbatch_multiple=True,
        zero_stages=(0,), zero_stages_with_pp=(0,), per_stage_zero=False,  # no distributed optimizer yet (2022)
        recompute_modes=("none", "full"), per_stage_recompute=False,  # --checkpoint-activations (global)
        sequence_parallel=False,  # arrived in 2022 (Korthikanti et al.)
        stage_placement=True),  # mpu rank order: pipeline outermost
    no_compile=megatron.SPEC.no_compile,  # no option that compiles the model either
    exports_as="megatron")  # the megatron export's flags run its plans
