"""Lower bounds on the step time: of the whole problem (bound), of one searched runtime
(any_bound, rank_floor, rank_costs, block_costs, rank_busy), of a restricted subproblem (restriction_bound), of
a DP state's completion (completion), of a uniform configuration (uniform_bound), and the least
memory of each layer (layer_floor). They price below the plans they bound and never exceed them."""
