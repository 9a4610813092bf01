"""The head's cross-entropy working set per runtime (pricing.transient_activation_bytes)."""

from __future__ import annotations

from planner.core.dims import StageDims
from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.pricing import Sharding, layer_price, layers_price
from planner.cost.stage_memory import replica_memory
from planner.cost.runtimes import RUNTIMES
from planner.inputs.hardware import load_catalog, load_cluster
from planner.inputs.model import load_model

MODEL = load_model("llama-3-8b")
CLUSTER = load_cluster("a100-v100-mix")
GPU, LINK = CLUSTER.groups[0].gpu, CLUSTER.groups[0].intra_node
HEAD = MODEL.layers[-1]
H100 = load_catalog()["H100-SXM5-80GB"]  # an fp8 GPU


def _params(runtime: str):
    return RUNTIMES[runtime].pricing.params(DEFAULT_PARAMS)


def test_torchtitan_eager_cross_entropy_holds_two_fp32_logit_gradients_in_the_head_backward():
    seq, tp, mb = 4096, 2, 3
    sh = Sharding("bf16", mb, seq, "flash", StageDims(tp, True), "full")
    vocab = MODEL.config.vocab
    assert layer_price(HEAD, sh, GPU, LINK, _params("torchtitan")).transient_bytes == 2 * 4 * seq * vocab / tp * mb
    # Megatron's vocab-parallel cross entropy computes the gradient in place of its saved softmax
    assert layer_price(HEAD, sh, GPU, LINK, _params("megatron")).transient_bytes == 0.0


def test_context_parallelism_splits_the_loss_working_set_with_the_tokens():
    full = Sharding("bf16", 1, 8192, "flash", StageDims(1), "full")
    split = Sharding("bf16", 1, 8192, "flash", StageDims(1, cp=4), "full")
    p = _params("torchtitan")
    assert layer_price(HEAD, split, GPU, LINK, p).transient_bytes == layer_price(HEAD, full, GPU, LINK, p).transient_bytes / 4


def test_replica_peak_takes_the_larger_of_the_head_and_a_recomputed_block_working_set():
    # a stage holding a block and the head: the head's backward and the block's recomputation
    # run at different times, so the peak adds the larger, not both
    sh = Sharding("bf16", 1, 8192, "flash", StageDims(1), "full")
    p = _params("torchtitan")
    block, head = (layer_price(layer, sh, GPU, LINK, p) for layer in (MODEL.layers[1], HEAD))
    span = layers_price((MODEL.layers[1], HEAD), sh, GPU, LINK, p)
    assert head.transient_bytes > block.transient_bytes > 0
    memory = replica_memory(span, 1, "bf16", sh.dims, p)
    assert memory.activations_bytes == block.act_bytes + head.act_bytes + head.transient_bytes


def test_zero3_holds_two_gathered_copies_of_its_largest_layer_beside_the_shards():
    from planner.cost.states import model_state_bytes

    p = _params("torchtitan")
    for dp, extra_layers in ((8, 2), (1, 0)):  # unsharded (one rank): nothing gathered
        dims = StageDims(2, True, dp, 3)
        sh = Sharding("bf16", 1, 2048, "flash", dims, "full")
        span = layers_price(MODEL.layers, sh, GPU, LINK, p)
        memory = replica_memory(span, 1, "bf16", dims, p)
        shards = model_state_bytes(span.weight_params, "bf16", 3, dp)[0]
        largest = max(layer.weight_params for layer in MODEL.layers) / 2  # the head (vocab x hidden), over tp 2
        assert memory.weights_bytes == shards + extra_layers * largest * 2


def test_torchtitan_accumulates_unsharded_gradients_in_fp32_below_zero_2():
    # FSDP2 under PP (the planner's ZeRO-1 form of torchtitan) upcasts the unsharded gradient to
    # its fp32 reduce dtype between micro-batches, under fp16 as under bf16
    dims = StageDims(1, False, 4, 1)
    p = _params("torchtitan")
    block = MODEL.layers[1].weight_params
    for dtype in ("bf16", "fp16"):
        sh = Sharding(dtype, 1, 2048, "flash", dims, "full")
        grads = replica_memory(layers_price(MODEL.layers[1:3], sh, GPU, LINK, p), 1, dtype, dims, p).gradients_bytes
        assert grads == 2 * 4 * block


def test_megatron_holds_fp32_gradient_buffers_under_bf16_not_fp16():
    # Megatron-LM validate_args forces accumulate_allreduce_grads_in_fp32 under bf16 (fp8 runs
    # with bf16 parameters): 4 bytes per gradient below ZeRO-2; fp16 keeps 16-bit gradients;
    # ZeRO-3's gradient shards are the dtype's
    p = _params("megatron")
    block = MODEL.layers[1].weight_params
    expected = {("bf16", 1): 4 * block, ("fp8", 0): 4 * block, ("fp16", 1): 2 * block, ("bf16", 3): 2 * block / 4}
    for (dtype, zero), want in expected.items():
        dims = StageDims(1, False, 4, zero)
        sh = Sharding(dtype, 1, 2048, "flash", dims, "full")
        span = layers_price(MODEL.layers[1:2], sh, H100, LINK, p)
        assert replica_memory(span, 1, dtype, dims, p).gradients_bytes == want, (dtype, zero)


def test_torchtitan_tp_keeps_the_gathered_gemm_inputs_whole_on_every_rank():
    # without recomputation a dense block keeps its attention and MLP inputs s x h whole on each
    # of the tp ranks (Megatron's SP linear keeps a 1/tp shard); the head keeps its input whole
    seq, tp = 2048, 4
    h = MODEL.config.hidden
    sh = Sharding("bf16", 1, seq, "flash", StageDims(tp, True), "none")
    titan, megatron = _params("torchtitan"), _params("megatron").with_updates(selective_recompute="op")
    for layer, inputs in ((MODEL.layers[1], 2), (HEAD, 1)):
        extra = (layer_price(layer, sh, GPU, LINK, titan).act_bytes
                 - layer_price(layer, sh, GPU, LINK, megatron.with_updates(cross_entropy="eager")).act_bytes)
        assert extra == inputs * 2 * seq * h * (1 - 1 / tp)
    no_sp = Sharding("bf16", 1, seq, "flash", StageDims(tp, False), "none")  # nothing gathered
    assert layer_price(MODEL.layers[1], no_sp, GPU, LINK, titan).act_bytes == \
        layer_price(MODEL.layers[1], no_sp, GPU, LINK, megatron).act_bytes
