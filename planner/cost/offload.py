"""Activation offload (Stage.offload_activations): the saved activations of a stage's first K
decoder blocks in host memory, copied over the GPU's PCIe link (the node's HostSpec), as
Megatron-core's cpu_offloading runs it through Transformer Engine's cpu_offload.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ActivationOffload:
    """Activation offload of one micro-batch through a span (Megatron-core cpu_offloading, run by
    Transformer Engine's cpu_offload.py AsyncDoubleBufferGroupOffloadHandler): the saved
    activations of its first K decoder blocks are copied to host memory during the forward and
    back before their backward, over the GPU's PCIe link."""

    host_bytes: float = 0.0  # the offloaded blocks' saved activations (per micro-batch)
    buffer_bytes: float = 0.0  # what stays on the GPU: the double buffer (the two largest blocks)
    fwd_exposed_s: float = 0.0  # device->host copies their blocks' forward does not hide
    bwd_exposed_s: float = 0.0  # host->device copies their blocks' backward does not hide

    @property
    def exposed_s(self) -> float:
        return self.fwd_exposed_s + self.bwd_exposed_s


NO_ACTIVATION_OFFLOAD = ActivationOffload()


def activation_offload(layers, span, blocks: int, pcie_bytes_per_s: float) -> ActivationOffload:
    """The first `blocks` decoder blocks of `layers` offloaded (`span`: their pricing.SpanPrice,
    whose parts are one per layer, as layers_price builds it). Each block's copy (act_bytes over PCIe, one direction)
    overlaps that block's compute and collectives on its side of the pass: exposed
    max(0, copy - forward) on the way out and max(0, copy - backward) on the way back (TE
    cpu_offload.py: block i's offload runs on a side stream beside block i+1's forward, its
    reload beside block i+1's backward; the blocks alike). The GPU keeps a double buffer: the
    block being copied and the next (TE's double-buffer handler), the two largest here."""
    if blocks <= 0:
        return NO_ACTIVATION_OFFLOAD
    host, sizes, fwd, bwd, seen = 0.0, [], 0.0, 0.0, 0
    for layer, (_, lp) in zip(layers, span.parts):
        if layer.kind != "decoder" or seen >= blocks:
            continue
        seen += 1
        copy_s = lp.act_bytes / pcie_bytes_per_s  # one block's saved activations over PCIe (HostSpec)
        fwd += max(0.0, copy_s - (lp.fwd_s + lp.tp_comm_fwd_s + lp.cp_comm_fwd_s + lp.ep_comm_fwd_s))
        bwd += max(0.0, copy_s - (lp.bwd_s + lp.tp_comm_bwd_s + lp.cp_comm_bwd_s + lp.ep_comm_bwd_s))
        host += lp.act_bytes
        sizes.append(lp.act_bytes)
    return ActivationOffload(host, sum(sorted(sizes)[-2:]), fwd, bwd)


def merge_offloads(offloads: Iterable[ActivationOffload]) -> ActivationOffload:
    """A pipeline rank's chunks' offloads together (their host bytes add; one double buffer, the largest)."""
    offloads = [o for o in offloads if o.host_bytes]
    if not offloads:
        return NO_ACTIVATION_OFFLOAD
    return ActivationOffload(sum(o.host_bytes for o in offloads), max(o.buffer_bytes for o in offloads),
                             sum(o.fwd_exposed_s for o in offloads), sum(o.bwd_exposed_s for o in offloads))


def offloaded_activation_bytes(act_offload: ActivationOffload, in_flight):
    """What one GPU's activation offload keeps in host memory: the offloaded blocks' activations
    of every micro-batch in flight (Schedule.in_flight_microbatches)."""
    return act_offload.host_bytes * in_flight
