"""The global batches `planner run` trains on (numpy only): the same for every plan, so two
plans given the same data and seed see the same samples in the same order.

* ``synthetic``: sample i of step t is an arithmetic sequence of token ids modulo the
  vocabulary, (start + stride * k) mod vocab, k = 0..seq_len, start and stride drawn from a
  generator seeded with (seed, t): learnable from the context, so the loss falls.
* a token file (nanoGPT's ``.bin``): a flat array of little-endian uint16 token ids; step t,
  sample i is the window of seq_len + 1 ids at window (t * global_batch + i) mod W, where W
  is the number of whole windows in the file.

A sample of seq_len + 1 ids gives seq_len inputs and seq_len next-token labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import BadInput

SYNTHETIC = "synthetic"


class Batches:
    def __init__(self, source: str, global_batch: int, seq_len: int, vocab: int, seed: int):
        self.source, self.global_batch, self.seq_len, self.vocab, self.seed = source, global_batch, seq_len, vocab, seed
        self.tokens = None
        if source != SYNTHETIC:
            path = Path(source)
            if not path.is_file():
                raise BadInput("no such token file (or use --data synthetic)", source)
            size = path.stat().st_size
            if size % 2:
                raise BadInput(f"a token file holds uint16 ids (an even number of bytes), this one has {size}", source)
            self.windows = size // 2 // (seq_len + 1)
            if self.windows == 0:  # an empty file included (it cannot be memory-mapped)
                raise BadInput(f"{size // 2} tokens, fewer than one sample of seq_len + 1 = {seq_len + 1}", source)
            try:
                self.tokens = np.memmap(path, dtype="<u2", mode="r")
            except OSError as exc:
                raise BadInput(f"cannot read: {exc.strerror or exc}", source) from None

    def batch(self, step: int) -> np.ndarray:
        """Step `step`'s global batch: global_batch x (seq_len + 1) int64 ids."""
        b, n = self.global_batch, self.seq_len + 1
        if self.tokens is None:
            rng = np.random.default_rng([self.seed, step])
            start = rng.integers(0, self.vocab, size=(b, 1))
            stride = rng.integers(1, max(2, self.vocab // 4), size=(b, 1))
            return (start + stride * np.arange(n)[None, :]) % self.vocab
        rows = [(step * b + i) % self.windows for i in range(b)]
        out = np.stack([np.asarray(self.tokens[r * n:(r + 1) * n], dtype=np.int64) for r in rows])
        if out.max() >= self.vocab:
            raise BadInput(f"token id {int(out.max())} at step {step} is outside the model's vocabulary of "
                           f"{self.vocab}", self.source)
        return out
