"""Human views: tables, the plan summary, `show`'s timeline and the network routes between stages."""
