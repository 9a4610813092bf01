"""Typed inputs, loaded and checked once: GPUs, links and clusters (with their topology),
model families, measured layer profiles and measured link curves."""
