"""What runs the searches: the driver (solve), the search space of a runtime (space), the lanes
and their parallel processes (lanes, parallel), the scaled clusters (scale), the plan a search
result builds (build) and the reason when there is none (no_plan)."""
