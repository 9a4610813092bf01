"""The cost model: one formula per quantity (formulas), the price of a stage replica
(pricing), pipeline sends and how long a rank waits for them (p2p), the parameters of GPU
architectures and runtimes (software stacks), `evaluate` (the price of a whole plan), what sets its
step time (explain, pipeline_links) and its model FLOPs (flops)."""
