"""`planner profile-links`: time the collectives between the ranks of a torchrun job (needs torch).

Launched with torchrun, one process per GPU (or per CPU rank with gloo). Ranks sharing a
node are those with torchrun's node rank (GROUP_RANK; the host name without it), or, with
`ranks_per_node` K, ranks K*i .. K*i+K-1 (fake nodes: a test of the inter-node path on one
machine). `node_groups` names the nodes in node order (NAME:COUNT, the cluster file's order).

Links measured, one after another (all communicators of one link at once, as training does):
  intra   every node of a group, its ranks in one communicator;
  inter   the first two nodes of a group: local rank i of one with local rank i of the other,
          all pairs at once; bandwidths times the pairs (a node's figure, like inter_node);
  pair    the first node of each of two groups, paired the same way (a `links` entry).
For each collective (all-reduce, all-gather, reduce-scatter, all-to-all, send/recv) and size:
`warmup` untimed runs, then `iters` timed ones, each after a barrier of its communicator and
ended by a device synchronize; a rank keeps the median, the link the slowest rank's median.
Fitting and bus bandwidth: planner.inputs.linkcurve. torch is imported only when this runs.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass
from typing import Any

from ..core.errors import BadInput
from ..inputs.linkcurve import OPS
from ..inputs.links import assemble_fragment, check_fragment, measured_link
from ..core.names import check_name

GPU_SIZES = tuple(4096 * 4**i for i in range(9))  # 4 KiB .. 256 MiB
CPU_SIZES = tuple(4096 * 4**i for i in range(6))  # 4 KiB .. 4 MiB
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
ELEMENT_BYTES = 4  # float32 buffers
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class LinkProfileOptions:
    sizes: tuple[int, ...] | None  # None: GPU_SIZES with nccl, CPU_SIZES with gloo
    iters: int = 20
    warmup: int = 5
    backend: str = "auto"
    ranks_per_node: int | None = None
    node_groups: tuple[tuple[str, int], ...] = ()


def parse_size(text: str, flag: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in UNITS and t[-1:] else ""
    try:
        value = int(t[: len(t) - len(unit)]) * UNITS[unit]
    except ValueError:
        raise BadInput(f"expected a size like 4096, 64K, 256M or 1G, got {text!r}", flag) from None
    if not 1 <= value <= 2**40:
        raise BadInput(f"a size must be from 1 byte to 1T, got {text!r}", flag)
    return value


def parse_sizes(text: str | None, flag: str = "--sizes") -> tuple[int, ...] | None:
    """'4K,64K,1M' (a list) or '4K:256M[:F]' (from, to, times F, default 2, like nccl-tests -b -e -f)."""
    if text is None:
        return None
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise BadInput(f"expected MIN:MAX or MIN:MAX:FACTOR, got {text!r}", flag)
        low, high = parse_size(parts[0], flag), parse_size(parts[1], flag)
        factor = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else (2 if len(parts) == 2 else 0)
        if factor < 2 or low > high:
            raise BadInput(f"expected MIN <= MAX and an integer FACTOR >= 2, got {text!r}", flag)
        sizes = [low]
        while sizes[-1] * factor <= high:
            sizes.append(sizes[-1] * factor)
    else:
        sizes = [parse_size(s, flag) for s in text.split(",")]
    if len(sizes) < 2 or any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise BadInput(f"expected at least 2 increasing sizes, got {text!r}", flag)
    return tuple(sizes)


def parse_node_groups(text: str | None, flag: str = "--node-groups") -> tuple[tuple[str, int], ...]:
    """'a100:2,v100:1': the first 2 nodes are group a100, the next one v100."""
    if not text:
        return ()
    out = []
    for part in text.split(","):
        name, _, count = part.rpartition(":")
        if not count.isdigit() or int(count) < 1:
            raise BadInput(f"expected NAME:NODES,... with NODES >= 1, got {part!r}", flag)
        out.append((check_name(name.strip(), flag, None), int(count)))
    if len({n for n, _ in out}) != len(out):
        raise BadInput(f"a group named twice in {text!r}", flag)
    return tuple(out)


def check_launch() -> None:
    missing = [k for k in TORCHRUN_ENV if k not in os.environ]
    if missing:
        raise BadInput(f"launch it with torchrun (no {', '.join(missing)} in the environment), e.g. "
                       "torchrun --nproc-per-node 8 -m planner.cli profile-links -o links.yaml", "profile-links")
    if int(os.environ["WORLD_SIZE"]) < 2:
        raise BadInput("needs at least 2 ranks (torchrun --nproc-per-node 2 or more)", "profile-links")


def node_layout(keys: list, ranks_per_node: int | None) -> list[list[int]]:
    """Global ranks per node, nodes ordered by their first rank."""
    if ranks_per_node:
        keys = [rank // ranks_per_node for rank in range(len(keys))]
    nodes: dict = {}
    for rank, key in enumerate(keys):
        nodes.setdefault(key, []).append(rank)
    return sorted(nodes.values())


def group_names(nodes: int, node_groups: tuple[tuple[str, int], ...]) -> list[str]:
    if not node_groups:
        return ["all"] * nodes
    if sum(c for _, c in node_groups) != nodes:
        raise BadInput(f"names {sum(c for _, c in node_groups)} nodes; the job has {nodes}", "--node-groups")
    return [name for name, count in node_groups for _ in range(count)]


def plan_links(nodes: list[list[int]], groups: list[str]) -> list[tuple[str, tuple[str, ...], list[list[int]]]]:
    """(scope, groups, communicators) of every link to measure, in order (see the module doc)."""
    order = list(dict.fromkeys(groups))
    first = {g: [i for i, x in enumerate(groups) if x == g] for g in order}

    def paired(first: int, second: int) -> list[list[int]]:
        return [[x, y] for x, y in zip(nodes[first], nodes[second])]

    links = []
    for g in order:
        comms = [nodes[i] for i in first[g] if len(nodes[i]) >= 2]
        if comms:
            links.append(("intra", (g,), comms))
    for g in order:
        if len(first[g]) >= 2:
            links.append(("inter", (g,), paired(first[g][0], first[g][1])))
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            links.append(("pair", (a, b), paired(first[a][0], first[b][0])))
    return links


def _timer(torch: Any, dist: Any, op: str, comm: list[int], group: Any, nbytes: int, device: Any):
    """(a function running `op` once, the bytes it moves by the nccl-tests convention)."""
    n = len(comm)
    count = max(n, nbytes // ELEMENT_BYTES // n * n)
    full = torch.ones(count, device=device)
    out = torch.empty(count, device=device)
    part = torch.empty(count // n, device=device)
    me = comm.index(dist.get_rank())
    if op == "all_reduce":
        run = lambda: dist.all_reduce(full, group=group)  # noqa: E731
    elif op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        run = lambda: gather(out, part, group=group)  # noqa: E731
    elif op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        run = lambda: scatter(part, full, group=group)  # noqa: E731
    elif op == "all_to_all":
        run = lambda: dist.all_to_all_single(out, full, group=group)  # noqa: E731
    else:  # sendrecv: to the next rank of the communicator, from the previous (nccl-tests sendrecv_perf)
        peers = comm[(me + 1) % n], comm[(me - 1) % n]

        def run():
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, full, peers[0], group),
                                                 dist.P2POp(dist.irecv, out, peers[1], group)]):
                work.wait()
    return run, count * ELEMENT_BYTES


def _measure(torch: Any, dist: Any, comm: list[int], group: Any, sizes: tuple[int, ...], options: LinkProfileOptions,
             device: Any) -> dict:
    """{op: [(bytes, median seconds)]} of this rank in its communicator."""
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    token = torch.zeros(1, device=device)
    result = {}
    for op in OPS:
        points = []
        for nbytes in sizes:
            run, moved = _timer(torch, dist, op, comm, group, nbytes, device)
            if points and moved <= points[-1][0]:
                continue  # rounded to the size before
            for _ in range(options.warmup):
                run()
            sync()
            times = []
            for _ in range(options.iters):
                dist.all_reduce(token, group=group)  # the communicator's barrier
                sync()
                start = time.perf_counter()
                run()
                sync()
                times.append(time.perf_counter() - start)
            points.append((moved, statistics.median(times)))
        result[op] = points
    return result


def profile_links(options: LinkProfileOptions) -> dict | None:
    """Measure every link of this torchrun job; the fragment on rank 0, None on the others."""
    from .profile_inputs import require_torch

    check_launch()
    torch = require_torch()
    import torch.distributed as dist

    backend = options.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise BadInput("nccl needs GPUs; torch sees none (use --backend gloo)", "--backend")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    sizes = options.sizes or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)
    dist.init_process_group(backend)
    try:
        keys: list = [None] * dist.get_world_size()
        dist.all_gather_object(keys, os.environ.get("GROUP_RANK") or socket.gethostname())
        nodes = node_layout(keys, options.ranks_per_node)
        groups = group_names(len(nodes), options.node_groups)
        plan = plan_links(nodes, groups)
        if not plan:
            raise BadInput("nothing to measure: one rank per node and one node", "profile-links")
        mine: dict[int, dict] = {}
        for index, (_, _, comms) in enumerate(plan):
            handles = [dist.new_group(comm) for comm in comms]  # every rank creates every group, in order
            for comm, group in zip(comms, handles):
                if dist.get_rank() in comm:
                    mine[index] = _measure(torch, dist, comm, group, sizes, options, device)
            dist.barrier(**({"device_ids": [device.index]} if device.type == "cuda" else {}))
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) != 0:
        return None
    links = []
    for index, (scope, names, comms) in enumerate(plan):
        per_rank = [gathered[r][index] for comm in comms for r in comm]
        sizes_by_op = {op: [b for b, _ in per_rank[0][op]] for op in OPS}
        times = {op: [max(r[op][i][1] for r in per_rank) for i in range(len(sizes_by_op[op]))] for op in OPS}
        ranks = len(comms[0])
        share = len(comms) if scope != "intra" else 1
        what = {"intra": f"{ranks} ranks in a node", "inter": f"{share} rank pairs between two nodes",
                "pair": f"{share} rank pairs between two groups"}[scope]
        link = measured_link(f"measured ({backend}, {what})", ranks, sizes_by_op, times, share)
        links.append((scope, names, link))
    measured = {"backend": backend, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                "world_size": len(keys), "nodes": len(nodes), "ranks_per_node": [len(n) for n in nodes],
                "warmup": options.warmup, "iters": options.iters, "torch": str(torch.__version__)}
    fragment = assemble_fragment(measured, links, bool(options.node_groups))
    return check_fragment(fragment, "the measured links")  # never write what --links would refuse
