"""`planner profile`'s inputs: its options and their checks, the device asked for, and torch,
imported only when a profile runs (`require_torch`), never when this module is imported.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any, Sequence

from ..core.errors import BadInput
from ..inputs.model import Model
from ..inputs.model_families import PROFILED_TYPES

TORCH_PIN = "torch==2.13.0"
INSTALL_HINT = f"needs PyTorch, which is not installed: pip install 'planner[profile]' (that is, {TORCH_PIN})"
DTYPES = ("fp32", "bf16", "fp16")
DEFAULT_SEQ_LEN = 2048
DEFAULT_MICRO_BATCHES = (1, 2)
DEFAULT_TPS = (1,)
DEFAULT_WARMUP = 2
DEFAULT_REPEATS = 5
MAX_LIST_VALUE = 1 << 20  # micro-batch or tp values beyond this are a typo, not a request


@dataclass(frozen=True)
class ProfileOptions:
    device: str = "cpu"
    seq_len: int = DEFAULT_SEQ_LEN
    micro_batches: tuple[int, ...] = DEFAULT_MICRO_BATCHES
    tps: tuple[int, ...] = DEFAULT_TPS
    dtype: str = "fp32"
    warmup: int = DEFAULT_WARMUP
    repeats: int = DEFAULT_REPEATS


# --- inputs ------------------------------------------------------------------------------------


def require_torch() -> Any:
    """The torch module, or BadInput with the install hint (exit 2) when it is missing."""
    try:
        import torch
    except ImportError:  # also when sys.modules["torch"] is None
        raise BadInput(INSTALL_HINT, "planner profile") from None
    return torch


def parse_int_list(text: str | None, flag: str, default: Sequence[int]) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): positive integers, duplicates dropped, sorted."""
    if text is None:
        return tuple(default)
    values = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise BadInput(f"must be a comma-separated list of positive integers, got {text!r}", flag) from None
        if value <= 0 or value > MAX_LIST_VALUE:
            raise BadInput(f"values must be from 1 to {MAX_LIST_VALUE}, got {value}", flag)
        values.append(value)
    if not values:
        raise BadInput(f"must list at least one positive integer, got {text!r}", flag)
    return tuple(sorted(set(values)))


def normalize_device(device: str) -> str:
    """'cpu', 'cuda' or 'cuda:N' (checked against the machine later, when torch is loaded)."""
    d = (device or "cpu").strip().lower()
    if d in ("cpu", "cuda"):
        return d
    if d.startswith("cuda:") and d[5:].isdigit():
        return f"cuda:{int(d[5:])}"
    raise BadInput(f"must be cpu, cuda or cuda:N, got {device!r}", "--device")


def default_seq_len(model: Model) -> int:
    c = model.config
    if c is not None and c.learned_positions and c.max_positions:
        return min(DEFAULT_SEQ_LEN, c.max_positions)
    return DEFAULT_SEQ_LEN


def check_inputs(model: Model, options: ProfileOptions) -> None:
    c = model.config
    if c is None:
        raise BadInput("profiling needs a model configuration (catalog name or HF config.json), "
                       "not a layer-profile file", "--model")
    if c.model_type not in PROFILED_TYPES:
        raise BadInput(f"profiling builds {', '.join(PROFILED_TYPES)} layers; a {c.model_type} model is "
                       "priced analytically only", "--model")
    if options.dtype not in DTYPES:
        raise BadInput(f"must be one of {', '.join(DTYPES)}, got {options.dtype!r}", "--dtype")
    if options.seq_len <= 0:
        raise BadInput(f"must be positive, got {options.seq_len}", "--seq-len")
    if c.learned_positions and options.seq_len > c.max_positions:
        raise BadInput(f"sequence length {options.seq_len} exceeds the model's {c.max_positions} "
                       "learned positions", "--seq-len")
    if options.warmup < 0:
        raise BadInput(f"must be zero or more, got {options.warmup}", "--warmup")
    if options.repeats < 1:
        raise BadInput(f"must be at least 1, got {options.repeats}", "--repeats")
    for tp in options.tps:
        for what, total in (("attention heads", c.num_heads), ("FFN hidden size", c.ffn_hidden)):
            if total % tp:
                raise BadInput(f"tp={tp} does not divide the model's {total} {what}", "--tp")
        if c.num_kv_heads > tp and c.num_kv_heads % tp:
            raise BadInput(f"tp={tp} does not divide the model's {c.num_kv_heads} key/value heads", "--tp")


def resolve_torch_device(torch: Any, device: str) -> Any:
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise BadInput("CUDA is not available on this machine (torch sees no GPU)", "--device")
    index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise BadInput(f"no GPU {index}: this machine has {torch.cuda.device_count()}", "--device")
    return torch.device("cuda", index)


def device_name(torch: Any, dev: Any) -> str:
    if dev.type == "cuda":
        return str(torch.cuda.get_device_name(dev))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip() or "cpu"
    except OSError:
        pass
    return platform.processor() or "cpu"
