"""Prefect flows that compose tasks: the step pipeline and repair."""
