"""The hardware's typed pieces: units, links, GPU types, node groups and devices (SI inside),
and the reader of one link's figures. planner.inputs.hardware builds clusters from them;
planner.inputs.topology routes between node groups with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..core import ranges
from ..core.errors import BadInput
from ..core.io import check_keys
from .linkcurve import LinkCurve, read_curves

GIB = 2**30
GB = 1e9
US = 1e-6
TFLOPS = 1e12
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")  # the catalog's peak_tflops keys
# the training dtypes whose decoder GEMMs run in a quantized format (planner.cost.fp8), each with
# the catalog peak its GEMMs run at and the architectures whose tensor cores have the format:
# fp8 (E4M3/E5M2 with a per-tensor scale): NVIDIA Ada and Hopper (4th-gen tensor cores; H100
# whitepaper, "FP8 Tensor Core"), Blackwell, AMD CDNA3 (MI300X data sheet, FP8 matrix); MXFP8
# (OCP Microscaling v1.0: 32 elements per E8M0 scale) and NVFP4 (E2M1, 16 elements per E4M3 scale
# and a per-tensor fp32 scale) on Blackwell's 5th-gen tensor cores, which scale blocks in the MMA
# (NVIDIA Blackwell architecture technical brief, 2024; Transformer Engine's MXFP8BlockScaling and
# NVFP4BlockScaling recipes need compute capability 10.0)
QUANTIZED_FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fp8": ("fp8", ("ada", "hopper", "blackwell", "cdna3")),
    "mxfp8": ("fp8", ("blackwell",)),
    "nvfp4": ("fp4", ("blackwell",)),
}


def peak_key(dtype: str) -> str:
    """The catalog peak a training dtype's GEMMs run at: its own, or its quantized format's."""
    return QUANTIZED_FORMATS[dtype][0] if dtype in QUANTIZED_FORMATS else dtype


@dataclass(frozen=True)
class Link:
    """A point-to-point link: bandwidth one direction, and one-message latency; `curves`, when
    measured (planner profile-links), price each collective by message size (planner.inputs.linkcurve)."""

    bandwidth_bytes_per_s: float
    latency_s: float
    kind: str = ""
    curves: tuple[LinkCurve, ...] = ()

    def shared_by(self, sharers: int) -> "Link":
        """One GPU's share when `sharers` GPUs use the link at once (curves scaled alike)."""
        return Link(self.bandwidth_bytes_per_s / sharers, self.latency_s, self.kind,
                    tuple(c.scaled(1 / sharers) for c in self.curves))


HOUR = 3600.0  # seconds: prices are given per GPU-hour and kept per GPU-second


@dataclass(frozen=True)
class GpuPower:
    """A GPU's board power (W): its maximum (TDP/TGP, the default power limit), its idle draw and the
    lowest power limit it accepts (`nvidia-smi -pl`); 0 where the catalog has no figure."""

    board_W: float
    idle_W: float
    min_cap_W: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float
    peak_flops: tuple[tuple[str, float], ...]  # (dtype, dense FLOP/s), hashable
    hbm_bandwidth_bytes_per_s: float
    intra_node: Link
    inter_node: Link
    vendor: str = ""
    source: str = ""
    architecture: str = ""  # volta, turing, ampere, ada, hopper, blackwell, cdna2, cdna3 ("": unknown)
    segment: str = ""  # datacenter or consumer ("": unknown)
    # what running it costs (planner.cost.energy); neither changes a step time, so neither is compared
    power: GpuPower | None = field(default=None, compare=False)
    price_usd_per_gpu_s: float | None = field(default=None, compare=False)  # the catalog's on-demand price
    price_source: str = field(default="", compare=False)

    def supports(self, dtype: str) -> bool:
        """A peak for `dtype` in the catalog; for a quantized training dtype (QUANTIZED_FORMATS),
        its format's peak on an architecture whose tensor cores have the format."""
        if dtype in QUANTIZED_FORMATS and self.architecture not in QUANTIZED_FORMATS[dtype][1]:
            return False
        return any(d == peak_key(dtype) for d, _ in self.peak_flops)

    def peak(self, dtype: str) -> float:
        for d, flops in self.peak_flops:
            if d == dtype:
                return flops
        raise BadInput(f"GPU {self.name} has no {dtype} support", field="--dtype")


@dataclass(frozen=True)
class HostSpec:
    """A node's host side, what ZeRO-Offload uses (Ren et al. 2021): its memory, one GPU's PCIe
    link to it (one direction) and the host memory bandwidth the CPU optimizer step streams
    at, shared by the node's GPUs. Defaults (a cluster file may state `host:` per node group):
    256 GiB, PCIe 4.0 x16 at ~25 GB/s achieved of 32 GB/s, 100 GB/s of host memory bandwidth
    (8 DDR4-3200 channels reach ~150 GB/s of 205 GB/s theoretical; CPU Adam streams well below)."""

    memory_bytes: float = 256 * 2**30
    pcie_bytes_per_s: float = 25e9
    memory_bandwidth_bytes_per_s: float = 100e9


@dataclass(frozen=True)
class NodeGroup:
    name: str
    gpu: GpuSpec
    nodes: int
    gpus_per_node: int
    intra_node: Link
    inter_node: Link  # whole node NIC, one direction
    first_rank: int
    host: HostSpec = HostSpec()  # the node's CPU side (a cluster file's `host:`)
    # what its GPUs cost to rent (the file's price_per_gpu_hour, else the GPU's catalog price; None: unknown)
    price_usd_per_gpu_s: float | None = field(default=None, compare=False)
    node_power_W: float = field(default=0.0, compare=False)  # a node's draw besides its GPUs
    # failures (planner.cost.reliability): each GPU's and each node's mean time between interruptions
    # (None: the cost model's default; node: none beyond its GPUs') and spot preemptions per node-hour
    gpu_mtbf_h: float | None = field(default=None, compare=False)
    node_mtbf_h: float | None = field(default=None, compare=False)
    preemptions_per_h: float = field(default=0.0, compare=False)
    # a mixed node group (one GPU type per local rank) becomes one NodeGroup per GPU type, its
    # "parts", on the same nodes: the file's group name, the local ranks this type holds in each
    # node, and how many GPUs a node holds in all (""/()/0: a group of one type, its own node)
    machine: str = ""
    local_ranks: tuple[int, ...] = ()
    node_gpus: int = 0
    fabric: Link | None = None  # a mixed node's intra_node, between GPUs of two types (None: one type)

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def machine_name(self) -> str:
        """The cluster file's node group this group's nodes are: its own name, or a mixed group's."""
        return self.machine or self.name

    @property
    def gpus_in_node(self) -> int:
        """GPUs in one of its nodes, of every type: what shares the node's NIC, host and power."""
        return self.node_gpus or self.gpus_per_node

    @property
    def node_share(self) -> float:
        """The fraction of a node's GPUs this group holds: 1, or a mixed node's part's."""
        return self.gpus_per_node / self.gpus_in_node

    @property
    def over_fabric(self) -> bool:
        """A GPU type's part of a one-node mixed group: the node's types talk over its fabric, each GPU
        over its own link (planner.inputs.topology.machine_route)."""
        return bool(self.machine) and self.nodes == 1 and self.fabric is not None

    def local_rank(self, index: int) -> int:
        """The node-local rank (CUDA device index) of the group's `index`-th GPU in a node."""
        return self.local_ranks[index] if self.local_ranks else index

    def rank_of(self, node: int, local_rank: int) -> int:
        """The cluster rank of the GPU at `local_rank` (its CUDA device index) of the group's node `node`."""
        index = self.local_ranks.index(local_rank) if self.local_ranks else local_rank
        return self.first_rank + node * self.gpus_per_node + index

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.num_gpus)


@dataclass(frozen=True)
class Device:
    """One GPU of the cluster: its rank, its GPU type, and where it sits (its node group, the
    node's index in the group, its index in the node)."""

    rank: int
    gpu: str
    group: str
    node: int
    local_rank: int

    def to_json(self) -> dict:
        return {"rank": self.rank, "group": self.group, "node": self.node,
                "local_rank": self.local_rank, "gpu": self.gpu}


# --- reading ---------------------------------------------------------------------------------


LINK_KEYS = ("kind", "bandwidth_GBps", "latency_us", "curve")  # formats.md sections 1 and 6


def read_link(data: Any, where: str, field_name: str, default: Mapping[str, Any],
              more_keys: tuple[str, ...] = ()) -> Link:
    """A link mapping (LINK_KEYS, and `more_keys`: a links entry's `between`) over `default`."""
    if data is None:
        data = default
    if not isinstance(data, dict):
        raise BadInput("must be a mapping with bandwidth_GBps and latency_us", where, field_name)
    check_keys(data, LINK_KEYS + more_keys, where, field_name)
    merged = {**default, **data}
    bw = ranges.get(merged, "bandwidth_GBps", "bandwidth_GBps", where, f"{field_name}.bandwidth_GBps")
    lat = ranges.get(merged, "latency_us", "latency_us", where, f"{field_name}.latency_us",
                     required=False, default=0.0)
    curves = read_curves(merged.get("curve"), where, f"{field_name}.curve", bw * GB, lat * US)
    return Link(bw * GB, lat * US, str(merged.get("kind", "")), curves)
