"""Sweeps: many plan requests over a grid, in parallel, with resumable output."""
