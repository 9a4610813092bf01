"""Time the pieces of PyTorch's ring attention (torchtitan's context parallelism) on one GPU node,
beside the planner's price for each piece. This is the measurement that would settle why
torchtitan's Llama 3.1 8B runs at cp 4 and 8 (32k tokens per GPU, one H100 node) are 36-42 %
slower than priced while cp 1 and 2 match (docs/fidelity.md, "Known misses").

    torchrun --nproc-per-node 8 benchmarks/cp_ring_probe.py             # CUDA + NCCL, every piece
    torchrun --nproc-per-node 8 benchmarks/cp_ring_probe.py --compile   # the ring under torch.compile
    python benchmarks/cp_ring_probe.py --cpu-world 4 --tokens 256       # gloo on CPU: collectives only

For each CP degree (2, 4, 8, up to the world size), the world splits into world / cp groups that
run at once, as the runs' FSDP x CP meshes do. Each piece is reported as the slowest rank's median:
  permute  one block's fp32 dK, dV sent to the next rank (funcol.permute_tensor, the ring's backward send)
  gather   the all-gather of every rank's K and V (funcol.all_gather_tensor, rotate method "allgather")
  causal   step 0's attention, forward + backward: the two local chunks, causal (SDPA flash)
  q-half   a later step whose source rank is higher: the second half of q x all of k, v
  kv-half  a later step whose source rank is lower: all of q x the first half of k, v
  ring     one attention layer under context_parallel (load-balanced, "allgather"), forward + backward
"priced" is the planner's figure for the same piece on the replayed run at that cp
(benchmarks/fidelity_runs.py, torchtitan-2412-t2-8b-*: the 500 W H100 96 GB, torch.compile as the
runs, or eager without --compile), at --tokens per GPU. The three attention shapes are each priced
as one ring step: attention_s / cp, since the model prices every step alike.
Shapes: Llama 3.1 8B (32 heads; K and V repeated to every head, as torchtitan's repeat_kv does;
head dim 128), bf16, batch 1. The CUDA pieces need a node of at least 2 GPUs.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

HEADS, HEAD_DIM = 32, 128  # Llama 3.1 8B, K and V repeated to the 32 query heads
DEGREES = (2, 4, 8)
RUN_TOKENS = 32768  # tokens per GPU in torchtitan's Table 2 runs
PIECES = ("permute", "gather", "causal", "q-half", "kv-half", "ring")


def priced_ms(cp: int, tokens: int, compiled: bool) -> dict[str, float]:
    """The planner's price of each piece (ms) on the replayed Table 2 run at this cp, at `tokens`
    per GPU, without recomputation (one forward and one backward)."""
    import fidelity
    from planner.cost.context_parallel import cp_comm, torch_ring_parts
    from planner.cost.formulas import attention_s
    from planner.cost.replica_pricer import PlanPricer, replica_links

    run = f"torchtitan-2412-t2-8b-fsdp{8 // cp}-cp{cp}-seq{RUN_TOKENS * cp}"
    case = next(c for c in fidelity.cases() if c.id == run)
    plan, stage = case.plan, case.plan.stages[0]
    replica = stage.replicas[0]
    gpu = next(g for g in plan.cluster.gpu_types if g.name == plan.cluster.device(replica.ranks[0]).gpu)
    params = fidelity.params_for(gpu, case.runtime).with_updates(**dict(case.settings))
    params = params.with_updates(torch_compile=compiled)
    sh = replace(PlanPricer(plan).sharding(stage), recompute="none", seq_len=tokens * cp)
    tp_link, cp_link = replica_links(plan.cluster, replica, stage)
    link = cp_link or tp_link
    layer = next(layer for layer in plan.model.layers if layer.kind == "decoder")
    parts = torch_ring_parts(layer, sh, gpu, link, params)
    attn_fwd, attn_bwd = attention_s(layer, gpu, sh, params)
    ring_fwd, ring_bwd = cp_comm(layer, sh, gpu, link, params)
    step = (attn_fwd + attn_bwd) / cp
    return {"permute": parts.dkv_s * 1e3, "gather": parts.gather_s * 1e3, "causal": step * 1e3,
            "q-half": step * 1e3, "kv-half": step * 1e3, "ring": (attn_fwd + attn_bwd + ring_fwd + ring_bwd) * 1e3}


def _median_s(fn, iters: int, sync, barrier) -> float:
    fn()  # warm-up: NCCL connections, kernels, compilation
    fn()
    sync()
    times = []
    for _ in range(iters):
        barrier()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _attention_step(torch, device, q_len: int, kv_len: int, causal: bool):
    """One SDPA call forward + backward with flash, fresh gradients each time."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def tensor(length, grad=True):
        return torch.randn(1, HEADS, length, HEAD_DIM, device=device, dtype=torch.bfloat16, requires_grad=grad)

    q, k, v, grad_out = tensor(q_len), tensor(kv_len), tensor(kv_len), tensor(q_len, grad=False)

    def run():
        q.grad = k.grad = v.grad = None
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.backward(grad_out)
    return run


def _ring(torch, device, world: int, cp: int, tokens: int, compiled: bool):
    """One attention layer under PyTorch's context_parallel (torchtitan's path): a callable that
    runs forward + backward, and the context it must run inside."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    from torch.nn.attention import SDPBackend, sdpa_kernel

    set_rotate_method("allgather")  # torchtitan's default context_parallel_rotate_method
    mesh = init_device_mesh("cuda", (world // cp, cp), mesh_dim_names=("dp", "cp"))["cp"]
    shape = (1, HEADS, tokens * cp, HEAD_DIM)
    q, k, v, grad_out = (torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(4))
    context = context_parallel(mesh, buffers=[q, k, v, grad_out], buffer_seq_dims=[2, 2, 2, 2],
                               no_restore_buffers={q, k, v, grad_out})

    def attention(q_, k_, v_):
        return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
    attend = torch.compile(attention, fullgraph=True) if compiled else attention

    def run():  # inside `context`: q, k, v, grad_out are this rank's load-balanced shards
        q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            out = attend(q_, k_, v_)
        out.backward(grad_out)
    return run, context


def _worker(rank: int, world: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    cpu = bool(args.cpu_world)
    if cpu:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(args.port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        device = torch.device("cpu")
        sync = lambda: None  # noqa: E731
    else:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
        sync = torch.cuda.synchronize

    def slowest(seconds: float) -> float:
        value = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return value.item() * 1e3

    tokens, kv_elements = args.tokens, args.tokens * HEADS * HEAD_DIM * 2  # this rank's K and V
    rows = []
    for cp in (d for d in DEGREES if d <= world and world % d == 0):
        group, _ = dist.new_subgroups(group_size=cp)
        barrier = lambda: dist.barrier(group=group)  # noqa: E731
        dkv = torch.randn(kv_elements, dtype=torch.float32, device=device)
        kv = torch.randn(kv_elements, dtype=torch.float32 if cpu else torch.bfloat16, device=device)
        ring_order = [(i + 1) % cp for i in range(cp)]
        all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor  # the newer name where it has one
        measured = {
            "permute": _median_s(lambda: funcol.wait_tensor(funcol.permute_tensor(dkv, ring_order, group)),
                                 args.iters, sync, barrier),
            "gather": _median_s(lambda: funcol.wait_tensor(all_gather(kv, 0, group)),
                                args.iters, sync, barrier),
        }
        if not cpu:
            for piece, (q_len, kv_len, causal) in {"causal": (tokens, tokens, True),
                                                   "q-half": (tokens // 2, tokens, False),
                                                   "kv-half": (tokens, tokens // 2, False)}.items():
                measured[piece] = _median_s(_attention_step(torch, device, q_len, kv_len, causal), args.iters,
                                            sync, barrier)
            run, context = _ring(torch, device, world, cp, tokens, args.compile)
            with context:
                measured["ring"] = _median_s(run, args.iters, sync, barrier)
        row = {piece: slowest(seconds) for piece, seconds in measured.items()}
        if rank == 0:
            rows.append((cp, row, priced_ms(cp, tokens, args.compile)))
    if rank == 0:
        print(f"tokens per GPU {tokens}, {world} ranks ({'gloo, CPU' if cpu else 'NCCL'}), "
              f"{'compiled' if args.compile else 'eager'}; ms, slowest rank's median of {args.iters}")
        print(f"{'cp':>3} {'piece':8} {'measured':>10} {'priced':>10} {'ratio':>7}")
        for cp, row, priced in rows:
            for piece in PIECES:
                if piece in row:
                    print(f"{cp:>3} {piece:8} {row[piece]:10.4g} {priced[piece]:10.4g} "
                          f"{row[piece] / priced[piece]:7.3g}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=RUN_TOKENS, help="tokens per GPU (default: the runs' 32768)")
    parser.add_argument("--iters", type=int, default=10, help="timed repetitions per piece (median)")
    parser.add_argument("--compile", action="store_true", help="run the ring's attention under torch.compile")
    parser.add_argument("--cpu-world", type=int, default=0, metavar="N",
                        help="spawn N gloo processes on the CPU and time the collectives only")
    args = parser.parse_args()
    if args.tokens % 2:
        parser.error("--tokens must be even (load balancing splits a rank's tokens into two chunks)")
    if args.cpu_world:
        import torch.multiprocessing as mp

        with socket.socket() as probe:  # a free port for the gloo rendezvous
            probe.bind(("127.0.0.1", 0))
            args.port = probe.getsockname()[1]
        mp.spawn(_worker, args=(args.cpu_world, args), nprocs=args.cpu_world, join=True)
    else:
        _worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    main()
