"""Mamba-2 mixers as hybrid models use them in place of attention in some layers (Nemotron-H,
NVIDIA 2025, arXiv 2504.03624; Nemotron 3, arXiv 2512.20848): their dimensions, parameters, FLOPs
and bytes per token, for planner.inputs.model's Layer to price.

One mixer (Dao & Gu 2024, "Transformers are SSMs", sec 7; transformers NemotronHMamba2Mixer,
megatron-core MambaMixer): an input projection to z (the gate), x, B, C and dt; a depthwise causal
convolution over x, B and C; the SSD scan; a gated RMSNorm of the output by z; an output projection.
Tensor parallelism splits x, z, dt and the heads, and B, C by group (megatron-core MambaMixer:
nheads and ngroups divide by the TP size): every per-token figure here is split over TP.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hf_reader import HfReader


@dataclass(frozen=True)
class Mamba:
    heads: int  # mamba_num_heads (H)
    head_dim: int  # mamba_head_dim (P)
    groups: int  # n_groups (G): each group's B and C are shared by heads / G heads
    state: int  # ssm_state_size (N)
    conv_kernel: int  # conv_kernel: the causal convolution's width
    chunk: int  # chunk_size (Q): the SSD algorithm's block of tokens
    conv_bias: bool = True  # use_conv_bias
    proj_bias: bool = False  # mamba_proj_bias: biases on the input and output projections

    @property
    def inner(self) -> int:
        """Width of x, z and the scan's output (heads x head_dim)."""
        return self.heads * self.head_dim

    @property
    def conv_width(self) -> int:
        """Channels of the convolution: x, B and C."""
        return self.inner + 2 * self.groups * self.state

    @property
    def in_proj_width(self) -> int:
        """Outputs of the input projection: z, x, B, C and one dt per head."""
        return self.inner + self.conv_width + self.heads

    def params(self, hidden: int) -> int:
        """The input projection, the convolution (and its bias), dt_bias, A_log and D per head, the
        gated norm's weight and the output projection (transformers NemotronHMamba2Mixer)."""
        params = (hidden * self.in_proj_width + self.conv_width * self.conv_kernel + 3 * self.heads
                  + self.inner + self.inner * hidden)
        if self.conv_bias:
            params += self.conv_width
        if self.proj_bias:
            params += self.in_proj_width + hidden
        return params

    def scan_flops_per_token(self) -> float:
        """Forward FLOPs of the SSD scan per token (Dao & Gu 2024, sec 6, the chunked algorithm):
        within a chunk, the C B^T scores of each group (2 Q N G) and their product with each head's
        x (2 Q P H); across chunks, each head's chunk state B^T x and its output C h (2 N P H each).
        The chunk-to-chunk state passing (2 N P H / Q) is left out, under 1 % of it."""
        q, n, p, h, g = self.chunk, self.state, self.head_dim, self.heads, self.groups
        return 2.0 * q * n * g + 2.0 * q * p * h + 4.0 * n * p * h

    def scan_bytes_per_token(self, nb: int) -> float:
        """HBM bytes the SSD scan's forward kernels move per token (mamba_ssm ssd_combined.py:
        _chunk_cumsum_fwd, _chunk_state_fwd, _state_passing_fwd, _bmm_chunk_fwd, _chunk_scan_fwd),
        counted as: x read twice and y written once, B and C read twice each (16-bit); in fp32 each
        chunk's H P N states written, read and written again by the state passing, and read (per
        token, a chunk's states over its Q tokens), the G Q scores C B^T written and read, dt and its
        cumulative sum read twice."""
        q, n, p, h, g = self.chunk, self.state, self.head_dim, self.heads, self.groups
        half = 3 * self.inner + 4 * g * n
        fp32 = 4 * h * p * n / q + 2 * g * q + 4 * h
        return nb * half + 4.0 * fp32

    def saved_elements_per_token(self) -> int:
        """Elements saved for backward per token (16-bit), beyond the mixer's input: the input
        projection's output (the fused kernel recomputes the convolution from it:
        mamba_ssm mamba_split_conv1d_scan_combined, megatron-core's memory-efficient path), the scan's
        output before the gated norm and the output projection's input."""
        return self.in_proj_width + 2 * self.inner

    def saved_fp32_per_token(self) -> int:
        """fp32 elements saved per token: dt after its softplus and its cumulative sum per head."""
        return 2 * self.heads

    def elementwise_elements_per_token(self) -> int:
        """Elements read and written per token by the mixer's non-GEMM kernels beside the scan: the
        convolution (with its SiLU) reads and writes x, B, C; the gated RMSNorm reads y and z and
        writes its output."""
        return 2 * self.conv_width + 3 * self.inner


def read_mamba(reader: HfReader) -> Mamba:
    """A Mamba-2 mixer from a Nemotron-H config (NemotronHConfig's keys; chunk_size defaults to 128,
    use_conv_bias to true, mamba_proj_bias to false in transformers' configuration_nemotron_h.py)."""
    return Mamba(heads=reader.num("mamba_num_heads", "num_heads"), head_dim=reader.num("mamba_head_dim", "hidden"),
                 groups=reader.num("n_groups", "num_heads"), state=reader.num("ssm_state_size", "hidden"),
                 conv_kernel=reader.num("conv_kernel", "hidden"), chunk=reader.num("chunk_size", "hidden", default=128),
                 conv_bias=reader.flag("use_conv_bias", True), proj_bias=reader.flag("mamba_proj_bias", False))
