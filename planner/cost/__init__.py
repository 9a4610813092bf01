"""The cost model: one formula per quantity (formulas), the price of a stage replica
(pricing), the parameters of GPU architectures and runtimes (software stacks), `evaluate`
(the price of a whole plan), what sets its step time (explain) and its model FLOPs (flops)."""
