"""`planner inspect`: what the planner reads from a model (a catalog name, a Hugging Face
config.json or a layer profile) without planning: its dimensions, its parameters (and, for a
mixture of experts, those one token passes through), and which keys of the config it reads.

A key counts as read when its value changes what the planner takes from the config: the
dimensions the cost model prices (planner.inputs.model_families), the rotary and norm settings
the exports write (planner.inputs.hf_extras) and the model's name. It is found by asking the
readers themselves: the config is read once as given and once with that key's value replaced by
one no reader accepts; a key whose replacement changes nothing is ignored. So the answer
follows the readers as they are, for every family, with no list of keys kept beside them.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..inputs.hf_extras import rope_and_norm
from ..inputs.model import MODELS_DIR, Model, load_model, resolve_model_path
from ..inputs.model_families import hf_dimensions
from ..core.io import load_mapping

NAME_KEY = "_name_or_path"  # a config file's model name (planner.inputs.model.load_model)
NESTED = ("text_config",)  # mappings whose own keys are read one by one (Gemma 3's language model)


class _Unreadable:
    """A value no reader accepts (not a number, flag, string, list or mapping)."""

    def __repr__(self) -> str:
        return "<unreadable>"


def active_params(model: Model) -> int:
    """Parameters one token passes through: every parameter but, in each MoE layer, the
    routed experts the router does not send it to (it keeps experts_top_k of num_experts,
    each expert the same size); equals `params` for a dense model."""
    total = 0
    for layer in model.layers:
        c = layer.config
        if layer.expert_params and c is not None and c.num_experts > 1:
            per_expert = layer.expert_params // c.num_experts
            total += layer.params - layer.expert_params + per_expert * c.experts_top_k
        else:
            total += layer.params
    return total


def _outcome(data: Mapping[str, Any], where: str) -> Any:
    """What the planner takes from a config: its dimensions and export settings, or the
    message of the error it raises."""
    try:
        dims = hf_dimensions(data, where)
        return dims, rope_and_norm(data, dims["model_type"], where)
    except Exception as exc:  # noqa: BLE001 - any failure differs from the config as given
        return type(exc).__name__, str(exc)


def _probe(data: dict, where: str, baseline: Any, path: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """The keys of `data` (at `path` inside the config) that change the outcome when made
    unreadable, and those that do not; nested mappings of NESTED key by key."""
    read: list[str] = []
    ignored: list[str] = []
    node: dict = data
    for part in path:
        node = node[part]
    for key in node:
        name = ".".join((*path, str(key)))
        if not path and key in NESTED and isinstance(node[key], dict):
            inner_read, inner_ignored = _probe(data, where, baseline, (key,))
            (read if inner_read else ignored).append(name)
            read += inner_read
            ignored += inner_ignored
            continue
        saved = node[key]
        node[key] = _Unreadable()
        try:
            changed = _outcome(data, where) != baseline
        finally:
            node[key] = saved
        (read if changed else ignored).append(name)
    return read, ignored


def config_keys(data: Mapping[str, Any], where: str = "model config", named: bool = True
                ) -> tuple[list[str], list[str]]:
    """The keys of a Hugging Face config that the planner reads, and those it ignores, in
    file order (nested ones as `text_config.hidden_size`). `named`: the model's name key
    (_name_or_path) counts as read, as it does for a config file (not for a catalog entry)."""
    copy = _deep_copy(data)
    read, ignored = _probe(copy, where, _outcome(copy, where))
    if named and NAME_KEY in ignored:
        ignored.remove(NAME_KEY)
        read.append(NAME_KEY)
    order = {key: i for i, key in enumerate(_all_keys(data))}
    return sorted(read, key=order.__getitem__), sorted(ignored, key=order.__getitem__)


def _deep_copy(data: Mapping[str, Any]) -> dict:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def _all_keys(data: Mapping[str, Any]) -> list[str]:
    keys = []
    for key, value in data.items():
        keys.append(str(key))
        if key in NESTED and isinstance(value, Mapping):
            keys += [f"{key}.{inner}" for inner in value]
    return keys


def inspect_model(name_or_path: str) -> dict:
    """What `planner plan` would read from `name_or_path`, as `planner inspect --json` prints
    it. Bad input as plan reports it (the model is loaded as plan loads it)."""
    model = load_model(name_or_path)
    path = resolve_model_path(name_or_path)
    catalog = path.parent == MODELS_DIR
    info: dict[str, Any] = {"name": model.name, "file": None if catalog else str(path),
                            "catalog": path.stem if catalog else None,
                            "format": "layer profile" if model.source == "profile" else "hf config",
                            "params": model.params, "active_params": active_params(model),
                            "layers": sum(1 for layer in model.layers if layer.kind == "decoder")}
    c = model.config
    if c is not None:
        moe_layers = sum(1 for layer in model.layers if layer.kind == "decoder" and layer.expert_params)
        info.update(model_type=c.model_type, hidden=c.hidden, heads=c.num_heads, kv_heads=c.num_kv_heads,
                    head_dim=c.head_dim, ffn_hidden=c.ffn_hidden,
                    dense_ffn_hidden=c.dense_ffn_hidden if c.dense_layers else None, vocab=c.vocab,
                    max_positions=c.max_positions, experts=c.num_experts if c.num_experts > 1 else None,
                    experts_top_k=c.experts_top_k if c.num_experts > 1 else None,
                    moe_layers=moe_layers if c.num_experts > 1 else None,
                    expert_width=c.moe_latent or None,
                    tied_embeddings=c.tied_embeddings, mla=c.mla is not None,
                    sliding_window_layers=sum(1 for w in c.layer_windows if w),
                    chunked_attention_layers=sum(1 for w in c.layer_chunks if w),
                    mamba_layers=c.layer_pattern.count("M"), mtp_layers=c.mtp_layers,
                    mtp_repeated=True if c.mtp_repeated else None,
                    mtp_params=model.mtp_params)
        read, ignored = config_keys(load_mapping(path, "model file"), str(path), named=not catalog)
    else:
        read, ignored = sorted(model.raw), []
    info.update(read_keys=read, ignored_keys=ignored)
    return info


__all__ = ["active_params", "config_keys", "inspect_model"]
