"""How a stage runs one layer on one replica: the key of cost.layer_time and pricing.layer_price."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.dims import StageDims
from ..inputs.model import DTYPE_BYTES
from .attention_kernels import priced_attention


@dataclass(frozen=True)
class Sharding:
    """The training's shape and the stage's choices that set one layer's time and memory on
    one replica: `dims` within the replica (StageDims.within_replica: dp and ZeRO do not
    change a layer)."""

    dtype: str
    micro_batch: int
    seq_len: int
    attention: str
    dims: StageDims
    recompute: str

    def priced(self, fused_attention: str) -> "Sharding":
        """This sharding as it is priced where `flash` runs `fused_attention` (CostParams.fused_attention,
        set per runtime and architecture: planner.cost.runtimes.flash_kernel): with standard attention,
        its time and saved scores, where the runtime has no fused kernel on the GPU."""
        attention = priced_attention(self.attention, fused_attention)
        return self if attention == self.attention else replace(self, attention=attention)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def local_seq_len(self) -> int:
        """Tokens of one sequence on one GPU (StageDims.local_seq_len: seq_len / cp)."""
        return self.dims.local_seq_len(self.seq_len)

    @property
    def tp(self) -> int:
        return self.dims.tp

    @property
    def sequence_parallel(self) -> bool:
        return self.dims.sequence_parallel
