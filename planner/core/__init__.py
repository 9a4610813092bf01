"""Foundations every layer uses: typed errors, the name rule, documented figure ranges, strict
file reading, output files, the search clock and a stage's parallel dimensions (dims)."""
