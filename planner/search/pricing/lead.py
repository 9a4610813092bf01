"""The lead blocks in the search's spans (ProblemInputs.lead, Model.decoder_lead: DeepSeek-V3's dense
first blocks): a stage's flags (has head, has embedding, lead blocks) say how many of them it holds
besides its searched blocks, each priced as it is (as planner.cost.evaluate prices a plan's layers, one
part per layer shape)."""

from __future__ import annotations

from ...core.dims import StageDims
from ...cost.fp8 import fp8_gather_params
from ...cost.formulas import CostParams
from ...cost.pricing import LayerPrice
from ...inputs.model import Layer


Lead = tuple[Layer, int] | None  # (one lead block, their count): ProblemInputs.lead


def lead_parts(price: LayerPrice | None, count: int) -> tuple:
    """The span parts `count` lead blocks add: `price` is the lead block's LayerPrice under the span's
    sharding (lead_price; None: the model has no lead)."""
    if price is None or not count:
        return ()
    return ((float(count), price),)


def lead_price(lead: Lead, price_of) -> LayerPrice | None:
    """`price_of(layer)` of the lead block, None without one."""
    return None if lead is None else price_of(lead[0])


def lead_fp8_gathered(lead: Lead, dims: StageDims, dtype: str, params: CostParams, count: int) -> float:
    """The weights of `count` lead blocks FSDP all-gathers in fp8 (fp8_gather_params, as the decoder
    blocks')."""
    if lead is None or not count:
        return 0.0
    return count * fp8_gather_params(lead[0], dims, dtype, params.fp8_recipe, params.fp8_all_gather)
