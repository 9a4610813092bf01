"""What a runtime needs to build the same model but the cost does not depend on: rotary base and
scaling, the share of each head that is rotated, norm epsilon. Read from a Hugging Face config.json
(the plan's model.config) for the exports (planner.export); absent keys take the family's
transformers default, named per family below (transformers/models/<family>/configuration_*.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..core.errors import BadInput

# model_type -> (rope_theta, norm epsilon) of its transformers configuration class when the
# config leaves them out; rope_theta None: no rotary positions (GPT-2's learned table)
HF_DEFAULTS: dict[str, tuple[float | None, float]] = {
    "llama": (10000.0, 1e-6),  # LlamaConfig
    "mistral": (10000.0, 1e-6),  # MistralConfig
    "mixtral": (1e6, 1e-5),  # MixtralConfig
    "qwen2": (10000.0, 1e-6), "qwen2_moe": (10000.0, 1e-6),  # Qwen2Config, Qwen2MoeConfig
    "qwen3": (10000.0, 1e-6), "qwen3_moe": (10000.0, 1e-6),  # Qwen3Config, Qwen3MoeConfig
    "deepseek_v3": (10000.0, 1e-6), "kimi_k2": (10000.0, 1e-6),  # DeepseekV3Config
    "gemma2": (10000.0, 1e-6),  # Gemma2Config
    "gemma3": (1e6, 1e-6), "gemma3_text": (1e6, 1e-6),  # Gemma3TextConfig (global layers)
    "phi3": (10000.0, 1e-5),  # Phi3Config
    "olmo2": (10000.0, 1e-5),  # Olmo2Config
    "gpt2": (None, 1e-5),  # GPT2Config.layer_norm_epsilon
    "gpt_neox": (10000.0, 1e-5),  # GPTNeoXConfig.rotary_emb_base, layer_norm_eps
}
NORM_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")
ROTARY_FRACTION_KEYS = ("rotary_pct", "partial_rotary_factor")


@dataclass(frozen=True)
class RopeAndNorm:
    rope_theta: float | None  # None: no rotary positions
    norm_eps: float
    rotary_fraction: float = 1.0  # share of each head's q/k dimensions that is rotated
    rope_scaling: Mapping[str, Any] | None = None  # the config's rope_scaling, as given


def _number(data: Mapping[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise BadInput(f"must be a positive number, got {value!r}", where, key)
    return float(value)


def text_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config.json: its `text_config` where it nests one (Gemma 3)."""
    return raw["text_config"] if isinstance(raw.get("text_config"), Mapping) else raw


def rope_and_norm(raw: Mapping[str, Any], model_type: str, where: str = "model config") -> RopeAndNorm:
    data = text_config(raw)
    theta_default, eps_default = HF_DEFAULTS.get(model_type, (10000.0, 1e-5))
    theta = None if theta_default is None else (
        _number(data, "rope_theta", where) or _number(data, "rotary_emb_base", where) or theta_default)
    eps = next((v for v in (_number(data, k, where) for k in NORM_EPS_KEYS) if v is not None), eps_default)
    fraction = next((v for v in (_number(data, k, where) for k in ROTARY_FRACTION_KEYS) if v is not None), 1.0)
    scaling = data.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, Mapping):
        raise BadInput(f"must be null or a mapping, got {scaling!r}", where, "rope_scaling")
    return RopeAndNorm(theta, eps, fraction, dict(scaling) if scaling else None)
