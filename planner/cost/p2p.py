"""Pipeline point-to-point: what one boundary's messages take, and how much of them a pipeline
rank waits for per micro-batch under its runtime's schedule (Runtime.pipeline_p2p).

One micro-batch crosses a boundary twice: its activation forward and its gradient back, each one
message of boundary_bytes (Narayanan et al. 2021, sec 4.1). How a rank waits for them:

  exchange    both ends post the boundary's send and receive together and wait for both
              (Megatron-LM's batch_isend_irecv in 1F1B): the two directions run at once, so each
              end waits one message time per micro-batch and boundary;
  sequential  blocking send, then blocking receive (DeepSpeed's pipeline engine): each end waits
              for both messages, one after the other;
  overlapped  sends and receives posted ahead and waited for after the next compute (Megatron-LM's
              interleaved schedule with --overlap-p2p-communication): the rank waits only for the
              part of its sends its own compute does not cover; receives wait for nothing.

Every function takes Python numbers or numpy arrays alike (planner.cost.pricing's convention):
planner.cost.replica_pricer prices a plan's ranks with them, planner.search.pricing.stages and
planner.search.pricing.interleave every block count at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .formulas import CostParams, link_efficiency
from ..inputs.hardware import Link
from ..inputs.linkcurve import collective_s


@dataclass(frozen=True)
class P2PMode:
    name: str
    blocking: bool  # the rank waits for its messages (on its critical path), else only past its compute
    messages: int  # blocking: messages each end waits for per micro-batch and boundary


P2P_MODES = {mode.name: mode for mode in (P2PMode("exchange", True, 1), P2PMode("sequential", True, 2),
                                         P2PMode("overlapped", False, 1))}


def p2p_message_s(nbytes, link: Link, intra: bool, params: CostParams):
    """One message of `nbytes` one way over `link`: latency plus bytes over the bandwidth NCCL
    reaches (formulas.link_efficiency); a measured link by its send/recv curve."""
    if link.curves:
        return collective_s("sendrecv", nbytes, 2, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
    eff = link_efficiency(link, params, intra)
    return link.latency_s + nbytes / (link.bandwidth_bytes_per_s * eff)


def p2p_s(nbytes, link: Link, intra: bool, params: CostParams):
    """The link's time per micro-batch across one boundary: the activation forward and its
    gradient backward, one message each (Narayanan et al. 2021, sec 4.1)."""
    return 2 * p2p_message_s(nbytes, link, intra, params)


def p2p_rank_s(mode: P2PMode, sent_s, received_s, compute_s):
    """What a pipeline rank waits for per micro-batch, (send side, receive side): `sent_s` the
    one-way message times of its chunks' boundaries to their successors summed, `received_s` of
    its chunks' boundaries from their predecessors, `compute_s` its time per micro-batch without
    them. Blocking: each end waits for `messages` messages of each of its boundaries. Overlapped:
    its sends take the link while it computes, and hold it up only where they outlast its compute
    (the rank as a whole: equal chunks give each chunk's alike)."""
    if mode.blocking:
        return mode.messages * sent_s, mode.messages * received_s
    return np.maximum(sent_s - compute_s, 0.0), 0.0 * received_s
