"""Typed, range-checked reads of a parsed Hugging Face config.json, for the family readers of
planner.inputs.model_families and planner.inputs.mamba."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..core import ranges
from ..core.errors import BadInput


class HfReader:
    """Typed, range-checked reads of one config mapping; `prefix` names a nested one."""

    def __init__(self, data: Mapping[str, Any], where: str, prefix: str = ""):
        self.data, self.where, self.prefix = data, where, prefix

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def num(self, key: str, figure: str, default: int | None = None, required: bool = True) -> int | None:
        """data[key] in RANGES[figure]; absent: `default` when given (a documented HF
        default), else bad input when `required`, else None."""
        need = required and default is None
        value = ranges.get(self.data, key, figure, self.where, self.prefix + key, required=need)
        return default if value is None else value

    def first(self, keys: tuple[str, ...], figure: str) -> int:
        key = next((k for k in keys if self.has(k)), keys[0])
        return self.num(key, figure)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise BadInput(f"must be true or false, got {value!r}", self.where, self.prefix + key)
        return value

    def rate(self, key: str) -> float:
        """A dropout probability: absent or null is 0; otherwise a number in [0, 1]."""
        value = self.data.get(key)
        if value is None:
            return 0.0
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
            raise BadInput(f"must be a probability between 0 and 1, got {value!r}", self.where, self.prefix + key)
        return float(value)

    def refuse_true(self, *keys: str) -> None:
        for key in keys:
            if self.flag(key, False):
                raise BadInput(f"{key} true is not modelled for this model_type", self.where, self.prefix + key)

    def index_list(self, key: str, layers: int) -> tuple[int, ...]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                   and 0 <= i < layers for i in value):
            raise BadInput(f"must be a list of layer indices from 0 to {layers - 1}", self.where, self.prefix + key)
        return tuple(sorted(set(value)))

    def layer_windows(self, layers: int, window: int, windowed: Callable[[int], bool]) -> tuple[int, ...]:
        """Each decoder's attention window: `layer_types` when the config lists them
        (transformers >= 4.53 writes them), else the family's pattern `windowed(i)`."""
        types = self.data.get("layer_types")
        if types is not None:
            kinds = ("full_attention", "sliding_attention")
            if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
                raise BadInput(f"must list {layers} of {', '.join(kinds)}", self.where, self.prefix + "layer_types")
            pattern = [t == "sliding_attention" for t in types]
        else:
            pattern = [windowed(i) for i in range(layers)]
        if not window or not any(pattern):
            return ()
        return tuple(window if w else 0 for w in pattern)
