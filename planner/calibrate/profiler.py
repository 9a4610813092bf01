"""`planner profile`: time each distinct layer of a model on this machine (needs torch).

The embedding, one decoder block (every block of a model is identical, so it is measured once
and its numbers reused for every block entry) and the final norm + LM head are built with
`planner.calibrate.torch_layers.build_layer` at their real dimensions, for each tensor-parallel degree
as the shard of one rank (no communication is timed). For each micro-batch size, after
`warmup` untimed runs, `repeats` forward passes and, separately, their backward passes (a
ones gradient on the output) are timed and the median is kept: `time.perf_counter` on CPU,
CUDA events with a synchronize on a GPU. Activation memory is the bytes of the tensors
autograd saves for backward (`torch.autograd.graph.saved_tensors_hooks`, parameters left
out, each tensor counted once), per sample; on a GPU the peak of
`torch.cuda.max_memory_allocated` over a forward and backward is recorded too.

The result is a layer-profile file (formats.md section 3) that `planner.inputs.model.load_model`
reads back: per layer the analytic parameters, forward FLOPs, saved-activation and output
bytes per sample, and a `measured` block with the timings.

torch is optional (`pip install 'planner[profile]'`): it is imported only when a profile
runs, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import statistics
import time
from typing import Any, Callable

from ..core.errors import BadInput, NoFeasiblePlan
from ..inputs.model import DTYPE_BYTES, Layer, Model
from .profile_inputs import ProfileOptions, check_inputs, device_name, require_torch, resolve_torch_device

FORMAT = "planner.profile/v1"


# --- measuring ---------------------------------------------------------------------------------


def _is_oom(torch: Any, exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class _Timer:
    """Seconds of a callable: perf_counter on CPU, CUDA events (and a synchronize) on a GPU."""

    def __init__(self, torch: Any, dev: Any):
        self.torch = torch
        self.cuda = dev.type == "cuda"
        self.dev = dev

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def __call__(self, fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            self.sync()
            start.record()
            result = fn(*args)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3, result
        t0 = time.perf_counter()
        result = fn(*args)
        return time.perf_counter() - t0, result


def _make_input(torch: Any, layer_kind: str, config: Any, batch: int, seq_len: int,
                dtype: Any, dev: Any) -> Any:
    if layer_kind == "embedding":
        return torch.randint(0, config.vocab, (batch, seq_len), device=dev)
    # the block and head inputs receive gradients, as in training (the previous layer needs them)
    return torch.randn(batch, seq_len, config.hidden, dtype=dtype, device=dev, requires_grad=True)


def saved_bytes(torch: Any, module: Any, sample: Any) -> int:
    """Bytes of the tensors autograd saves in one forward of `module(sample)`.

    Parameters (and views of them) are left out: they are weights, not activations. A tensor
    saved by several operations is counted once.
    """
    param_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: set[tuple] = set()
    total = 0

    def pack(tensor: Any) -> Any:
        nonlocal total
        try:
            ptr = tensor.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (rare): count it
            ptr = None
        if ptr is not None and ptr in param_storages:
            return tensor
        key = (ptr, tensor.storage_offset() if ptr is not None else id(tensor), tuple(tensor.shape),
               tuple(tensor.stride()), tensor.dtype)
        if key not in seen:
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = module(sample)
    del out
    return total


def measure_layer(torch: Any, module: Any, kind: str, config: Any, options: ProfileOptions,
                  dev: Any, dtype: Any, timer: _Timer, advance: Callable[[], None]) -> dict:
    """Median forward and backward seconds and saved bytes per sample for each micro-batch."""
    fwd, bwd, saved, peak = [], [], [], []
    for batch in options.micro_batches:
        x = _make_input(torch, kind, config, batch, options.seq_len, dtype, dev)
        if timer.cuda:
            timer.sync()
            torch.cuda.reset_peak_memory_stats(dev)
        fwd_times, bwd_times = [], []
        grad = None
        for i in range(options.warmup + options.repeats):
            module.zero_grad(set_to_none=True)
            if x.requires_grad:
                x.grad = None
            t_fwd, out = timer(module, x)
            if grad is None:
                grad = torch.ones_like(out)
            t_bwd, _ = timer(out.backward, grad)
            del out
            if i >= options.warmup:
                fwd_times.append(t_fwd)
                bwd_times.append(t_bwd)
        if timer.cuda:
            timer.sync()
            peak.append(int(torch.cuda.max_memory_allocated(dev)))
        saved.append(saved_bytes(torch, module, x) / batch)
        fwd.append(statistics.median(fwd_times))
        bwd.append(statistics.median(bwd_times))
        module.zero_grad(set_to_none=True)
        del x, grad
        advance()
    result = {"fwd_s": fwd, "bwd_s": bwd, "saved_bytes_per_sample": saved}
    if timer.cuda:
        result["peak_memory_bytes"] = peak
    return result


def _measured_block(per_tp: dict[int, dict], options: ProfileOptions) -> dict:
    """formats.md's `measured`: lists aligned with micro_batch for one tp (nested per tp for
    several), and `by_tp` with the same keys for every tp degree."""
    tps = list(options.tps)
    keys = list(per_tp[tps[0]].keys())
    block: dict[str, Any] = {"micro_batch": list(options.micro_batches), "tp": tps}
    for key in keys:
        block[key] = per_tp[tps[0]][key] if len(tps) == 1 else [per_tp[tp][key] for tp in tps]
    block["by_tp"] = {str(tp): dict(per_tp[tp]) for tp in tps}
    return block


def _distinct_layers(model: Model) -> list[tuple[str, Layer]]:
    """(kind, first layer of that kind) in model order: embedding, one decoder block, head."""
    seen: dict[str, Layer] = {}
    for layer in model.layers:
        seen.setdefault(layer.kind, layer)
    return list(seen.items())


def _describe(kind: str, layer: Layer, model: Model) -> str:
    if kind == "decoder":
        n = sum(1 for la in model.layers if la.kind == "decoder")
        return f"decoder block ({layer.name}, reused for all {n} blocks)" if n > 1 else f"decoder block ({layer.name})"
    return f"{layer.name} ({kind})"


def _measure_all(torch: Any, build_layer: Callable, model: Model, distinct: list[tuple[str, Layer]],
                 options: ProfileOptions, dev: Any, dtype: Any, timer: _Timer, progress: Any, task: Any,
                 advance: Callable[[], None]) -> dict[str, dict]:
    """The `measured` block of each distinct layer kind."""
    config = model.config
    by_kind: dict[str, dict] = {}
    for kind, layer in distinct:
        per_tp: dict[int, dict] = {}
        for tp in options.tps:
            label = _describe(kind, layer, model)
            if progress is not None:
                progress.update(task, description=f"{layer.name} tp={tp}")
            module = None
            try:
                module = build_layer(config, kind, dtype=dtype, device=dev, tp=tp)
                module.train()
                per_tp[tp] = measure_layer(torch, module, kind, config, options, dev, dtype, timer, advance)
            except ValueError as exc:  # a shape tp cannot split (checked above; kept as a guard)
                raise BadInput(str(exc), "--tp") from None
            except (RuntimeError, MemoryError) as exc:
                if not _is_oom(torch, exc):
                    raise
                raise NoFeasiblePlan(
                    f"layer {label} does not fit in the memory of {options.device} "
                    f"({options.dtype}, seq-len {options.seq_len}, tp {tp}, micro-batch up to "
                    f"{max(options.micro_batches)}); try a smaller --micro-batch or --seq-len, or a larger --tp",
                    device=options.device) from None
            finally:
                del module
                if timer.cuda:
                    torch.cuda.empty_cache()
        by_kind[kind] = _measured_block(per_tp, options)
    return by_kind


def profile_model(model: Model, options: ProfileOptions, progress: Any = None,
                  make_timer: Callable[[Any, Any], Any] = _Timer) -> dict:
    """Measure every distinct layer and return the layer-profile document (formats.md sec 3).

    `progress`, if given, is a rich.progress.Progress that is advanced once per measurement.
    `make_timer(torch, device)` builds the clock: `_Timer` (wall time on CPU, CUDA events on a
    GPU) unless a test injects one with the same interface (`cuda`, `sync()`, and
    `timer(fn, *args) -> (seconds, result)`) to pin what is done with the times.
    Raises BadInput for impossible options and NoFeasiblePlan when a layer does not fit.
    """
    torch = require_torch()
    from .torch_layers import build_layer

    check_inputs(model, options)
    dev = resolve_torch_device(torch, options.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[options.dtype]
    timer = make_timer(torch, dev)
    distinct = _distinct_layers(model)
    steps = len(distinct) * len(options.tps) * len(options.micro_batches)
    task = progress.add_task("profiling", total=steps) if progress is not None else None

    def advance() -> None:
        if progress is not None:
            progress.advance(task)

    # CUDA events record on the current device's stream: make the chosen GPU current
    with (torch.cuda.device(dev) if timer.cuda else contextlib.nullcontext()):
        by_kind = _measure_all(torch, build_layer, model, distinct, options, dev, dtype, timer,
                               progress, task, advance)

    nbytes = DTYPE_BYTES[options.dtype]
    layers = []
    for layer in model.layers:
        layers.append({
            "name": layer.name,
            "kind": layer.kind,
            "params": int(layer.params),
            "fwd_flops_per_sample": _number(layer.fwd_flops_per_sample(options.seq_len)),
            "act_bytes_per_sample": _number(layer.act_bytes_per_sample(
                options.seq_len, recompute="none", tp=1, dtype_bytes=nbytes)),
            "out_bytes_per_sample": _number(layer.out_bytes_per_sample(options.seq_len, nbytes)),
            "measured": _copy_measured(by_kind[layer.kind]),
        })
    return {
        "format": FORMAT,
        "model": model.name,
        "dtype": options.dtype,
        "seq_len": options.seq_len,
        "source": "measured",
        "device": device_name(torch, dev),
        "date": _dt.date.today().isoformat(),
        "torch_version": str(torch.__version__),
        "warmup": options.warmup,
        "repeats": options.repeats,
        "layers": layers,
    }


def _number(value: float) -> int | float:
    """Whole numbers as JSON integers, others as floats."""
    if math.isfinite(value) and float(value).is_integer():
        return int(value)
    return float(value)


def _copy_measured(block: dict) -> dict:
    """A fresh copy per layer entry, so that editing one entry leaves the others alone."""
    import copy

    return copy.deepcopy(block)
