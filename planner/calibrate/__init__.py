"""Measuring and fitting: the layer and link profilers (torch), and fitting cost parameters."""
